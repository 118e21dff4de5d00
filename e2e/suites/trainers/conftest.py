"""One RewardModel (the tiny sequence model) that every trainer's test scores against, and
transformers' numbers to hold the trainers' rewards to.

Where it is served (TRAINERS_SERVE):
- ``node`` (the default, `make trainers`): on the test bed's real node through KServe, exactly as
  e2e/tests/node/test_real_node_rewards.py serves it (``testenv.served``), reached at its
  ``status.url``. The trainers run on the host, which has no cluster DNS: each driver runs with a
  private /etc/hosts that names the URL's Service address (``testenv.addons.keda.with_private_hosts``), so
  the trainer's own client dials ``status.url`` as given and kube-proxy carries it to the gateway pod.
- ``local``: the same rendering as local processes (the pinned vLLM's CPU build and the gateway),
  for working on the trainers' side without the node (reward_testing.vllm_server).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from summary import LINES

from reward_operator.render import render_reward_model
from reward_testing.gateway_process import local_gateway, rendered_gateway
from reward_testing.tiny_models import TinyModel, reference_scores, tar_model
from reward_testing.vllm_server import run_vllm
from testenv import node
from testenv.addons import keda
from testenv.plane import controlplane
from testenv.served import reward_model, serve

NAME = "trainer-rm"


@dataclass
class Served:
    """The RewardModel the trainers call."""

    url: str  # status.url (node), or the local gateway's
    wrap: Callable[[list[str]], list[str]]  # a driver's command line -> the one that reaches ``url``
    model: TinyModel
    where: str
    namespace: str | None = None  # node: where its pods run
    name: str = NAME


@pytest.fixture(scope="session")
def served(request, tmp_path_factory) -> Iterator[Served]:
    where = os.environ.get("TRAINERS_SERVE", "node")
    if where not in ("node", "local"):
        raise pytest.UsageError(f"TRAINERS_SERVE is node or local, not {where!r}")
    tiny_models = request.getfixturevalue("tiny_models")
    model = tiny_models["sequence"]
    if where == "local":
        yield from _served_locally(model, tmp_path_factory.mktemp("served"))
    else:
        yield from _served_on_the_node(request, model, tmp_path_factory.mktemp("hosts"))


def _served_locally(model: TinyModel, workdir) -> Iterator[Served]:
    spec = reward_model(NAME, "sequence", "hf://tiny/reward-model", 0)
    spec["metadata"].update(namespace="trainers", uid="00000000-0000-4000-8000-000000000027")
    (isvc,) = [child for child in render_reward_model(spec) if child["kind"] == "InferenceService"]
    with ExitStack() as stack:
        vllm = stack.enter_context(run_vllm(isvc, model.path, workdir / "vllm"))
        url = stack.enter_context(local_gateway(*rendered_gateway(isvc), vllm.url, workdir / "gw.log"))
        yield Served(url, lambda command: command, model, "local vLLM + gateway processes")


def _served_on_the_node(request, model: TinyModel, workdir) -> Iterator[Served]:
    cluster = request.getfixturevalue("cluster")
    if not cluster.local or cluster.kubectl("get", f"node/{node.NAME}", check=False).returncode != 0:
        pytest.skip("needs the test bed's real node (or TRAINERS_SERVE=local)")
    request.getfixturevalue("operator")
    plane = controlplane.ControlPlane.attach(cluster.directory)
    plane.load_images(("vllm-cpu",))
    archive = tar_model(model, node.storage_dir(plane.directory) / "trainers-sequence.tar.gz")
    uri = node.storage_url(node.host_address(), plane.state.ports[node.STORAGE], archive.name)
    namespace = f"trainers-{os.getpid()}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node.namespace_for_real_node(namespace)))
    cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=60s")
    try:
        url = serve(cluster, namespace, reward_model(NAME, "sequence", uri, 0))["status"]["url"]
        host = url.split("://", 1)[1].split("/", 1)[0]
        service = host.split(".", 1)[0]
        address = cluster.kubectl("get", "service", service, "-n", namespace, "-o",
                                  "jsonpath={.spec.clusterIP}").stdout.strip()  # fmt: skip
        hosts = keda.HostsFile.create(workdir / "hosts")
        with hosts.names(address, [host]):
            yield Served(url, lambda command: keda.with_private_hosts(command, hosts.path), model,
                         f"the real node through KServe, at status.url {url}", namespace)  # fmt: skip
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="session")
def transformers_scores(served) -> Callable[[list[dict[str, Any]]], list[float]]:
    """transformers' reward for each item (``{"messages": [...]}`` or ``{"text": ...}``) on the served model."""

    def scores(items: list[dict[str, Any]]) -> list[float]:
        return [answer["reward"] for answer in reference_scores(served.model, items)]

    return scores


def pytest_terminal_summary(terminalreporter) -> None:
    if LINES:
        terminalreporter.section("trainers against a served RewardModel")
        for line in LINES:
            terminalreporter.write_line(line)
