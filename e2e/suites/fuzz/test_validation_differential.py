"""Offline validation (``reward_operator.api.validation``, what ``reward-operator render`` and
``validate`` run) against the real API server, on the fuzzer's specs.

Each spec of ``reward_testing.fuzz_specs`` (the ones ``make fuzz`` creates) is judged twice: offline,
and by the test bed's kube-apiserver with our CRDs installed, as a dry-run create with strict field
validation (``reward_operator.cluster.dry_run``, what ``render --validate=server`` sends). The verdicts
must be the same: both admit it, or both refuse it naming the same fields. The confusion table is
printed (offline accept/refuse x server accept/refuse, and for refusals on both sides whether the
fields agree); any disagreement is printed with its spec. Only the API server is needed: run it with
TESTENV_NODE=0 TESTENV_KSERVE=0 for the lightest control plane. ``FUZZ_EXAMPLES`` sets the number of
specs (default 500), ``FUZZ_SEED`` the seed, as for the fuzz.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import json
import os

import pytest

from reward_operator.api.validation import validate
from reward_operator.cluster.dry_run import connect, server_problems
from reward_testing.fuzz_specs import build, generate, short

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))
WORKERS = 8


def _fields(problems) -> frozenset[str]:
    return frozenset(problem.path for problem in problems)


@pytest.mark.timeout(max(600, EXAMPLES))
def test_offline_verdicts_equal_the_api_servers(cluster, namespace):
    cases, seeded = generate(EXAMPLES)
    specs = [build(case, index) for index, case in enumerate(cases)]
    digest = hashlib.sha256(json.dumps([s.manifest for s in specs], sort_keys=True).encode()).hexdigest()[:16]
    assert len(specs) >= min(EXAMPLES, 500), f"hypothesis generated only {len(specs)} specs"

    api = connect(cluster.kubeconfig)
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        server = list(pool.map(lambda spec: server_problems(api, spec.manifest, namespace), specs))
    offline = [validate(spec.manifest) for spec in specs]

    table: collections.Counter[str] = collections.Counter()
    disagreements = []
    for spec, here, there in zip(specs, offline, server, strict=True):
        cell = f"offline {'refuses' if here else 'accepts'}, server {'refuses' if there else 'accepts'}"
        table[cell] += 1
        if here and there:
            same = _fields(here) == _fields(there)
            table["  both refuse, same fields" if same else "  both refuse, other fields"] += 1
            if same:
                continue
        elif bool(here) == bool(there):
            continue
        disagreements.append(
            f"#{spec.index} {spec.case.sample} {[m.describe() for m in spec.case.mutations]}\n"
            f"    offline: {[str(p) for p in here]}\n    server:  {[str(p) for p in there]}\n"
            f"    spec: {short(spec.manifest['spec'], 600)}"
        )

    print(f"\nvalidation differential: {len(specs)} specs ({seeded}; specs sha256 {digest})")
    for cell in (
        "offline accepts, server accepts",
        "offline refuses, server refuses",
        "  both refuse, same fields",
        "  both refuse, other fields",
        "offline accepts, server refuses",
        "offline refuses, server accepts",
    ):
        print(f"  {table[cell]:5d}  {cell}")
    print(f"  {len(disagreements):5d}  disagreements")
    for line in disagreements[:25]:
        print(line)
    assert table["offline accepts, server accepts"] and table["offline refuses, server refuses"], "both paths needed"
    assert not disagreements, f"{len(disagreements)} of {len(specs)} verdicts differ (printed above)"
