"""A release the way a user meets it: pushed to a registry, verified with cosign, installed from ``oci://`` on a
node that never had our images, upgraded under traffic.

The test bed's registry (``TESTENV_REGISTRY=1``: distribution with TLS and basic auth, its CA trusted by the
real node's containerd) takes two releases made by ``python -m release`` (what ``make release`` runs), each
signed with a cosign key pair made here and no transparency log (cosign's air-gapped mode). The real node
imports none of our images with the registry on: every pod of ours pulls.

1. The registry holds what a release pushes: both images and the chart under each version, and the signatures'
   and attestations' artifacts beside them (``crane ls``).
2. ``cosign verify`` passes for every image and the chart by digest, and ``cosign verify-attestation`` for each
   image's SPDX SBOM; another key's verification fails.
3. Another image pushed under the new release's operator tag: ``cosign verify`` of the tag refuses it.
4. ``helm install`` of the previous release from ``oci://`` with the pull secret and the node's placement as the
   only values: the operator pod pulls its image, a CPU RewardModel's runtime and gateway images are pulled
   (``ctr images ls`` before and after), and its reward through ``status.url`` is transformers' number. Then,
   with a client sending rewards without a pause, ``helm upgrade`` to the new release: the CRDs upgraded, the
   operator and the gateway replaced, vLLM's pod kept (its image's digest did not change), every request
   answered; and the operator runs the signed digest the chart pins, not the tampered tag.

``make release-real`` runs it; not in ``make test``: cosign's and syft's builds, vLLM's 5.6 GB image pushed
and pulled, a vLLM cold start. Figures are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from release.tools import binary
from reward_testing.paths import REPO
from reward_testing.scoring_cases import PROMPT, RESPONSE, SPEC_TEMPLATE, assert_close
from reward_testing.waiting import wait_until
from testenv import builds, node, served
from testenv.addons import registry as registry_addon
from testenv.chart import delete_cluster_objects, helm_binary, run_helm
from testenv.helpers import ISVC_LABEL, get_json
from testenv.images.buildah import using_buildah
from testenv.served import finished, reward_model, rewards, serve

CHART_VERSION = yaml.safe_load((REPO / "charts" / "reward-operator" / "Chart.yaml").read_text())["version"]


def previous_tag() -> str | None:
    """The newest release tag (``v*``) behind this commit, if there is one."""
    found = subprocess.run(["git", "-C", str(REPO), "describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD^"],
                           capture_output=True, text=True)  # fmt: skip
    return found.stdout.strip() if found.returncode == 0 else None


# The previous release: the newest tag's tree, released again here; before the first tag, this tree as the new
# release's candidate (the upgrade then changes the operator's image and the chart, not vLLM's)
TAG = previous_tag()
PREVIOUS = TAG.removeprefix("v") if TAG else f"{CHART_VERSION}-rc.1"
NEW = CHART_VERSION if CHART_VERSION != PREVIOUS else f"{CHART_VERSION}-next.1"
PATH = "rlhf"  # the releases' path in the registry
RELEASE = "reward-operator"
PASSWORD = secrets.token_urlsafe(12)  # the cosign key's


def go_env(access: registry_addon.Access) -> dict[str, str]:
    return {**os.environ, **access.env(), "COSIGN_PASSWORD": PASSWORD}


def run(*args: str, env: dict[str, str], check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args[:3])} ... failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def access(cluster, plane) -> registry_addon.Access:
    return registry_addon.access(cluster, plane.directory)


@pytest.fixture(scope="module")
def keys(tmp_path_factory, access) -> dict[str, Path]:
    """A cosign key pair, and another one whose verification must fail."""
    folder = tmp_path_factory.mktemp("cosign")
    made = {}
    for name in ("release", "other"):
        (folder / name).mkdir()
        run(binary("cosign"), "generate-key-pair", env=go_env(access), cwd=folder / name)
        made[name] = folder / name
    return made


@pytest.fixture(scope="module")
def releases(access, keys, tmp_path_factory) -> dict[str, dict]:
    """The two releases, each ``python -m release`` as ``make release`` runs it; version -> its release.json."""
    made = {}
    # held across both: the second push of vLLM's unchanged layers finds them compressed in skopeo's cache
    with using_buildah():
        source = REPO
        if TAG:
            source = tmp_path_factory.mktemp("previous") / "tree"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(source), TAG], check=True)
        try:
            made[PREVIOUS] = make_release(access, keys, PREVIOUS, tmp_path_factory.mktemp("previous-out"), source)
        finally:
            if TAG:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(source)], check=False)
        made[NEW] = make_release(access, keys, NEW, tmp_path_factory.mktemp("new-out"), REPO)
    return made


def make_release(access, keys: dict[str, Path], version: str, out: Path, source: Path) -> dict:
    """``python -m release`` of the tree ``source`` into the test bed's registry, with its credentials and CA:
    its release.json."""
    env = go_env(access) | {"REGISTRY_USERNAME": access.username, "REGISTRY_PASSWORD": access.password,
                            "PYTHONPATH": f"{source / 'e2e'}:{source / 'testing'}"}  # fmt: skip
    started = time.monotonic()
    args = [sys.executable, "-m", "release", "--version", version, "--registry", f"{access.address}/{PATH}",
            "--ca-file", str(access.ca_file), "--cosign-key", str(keys["release"] / "cosign.key"),
            "--out", str(out)]  # fmt: skip
    result = subprocess.run(args, env=env, capture_output=True, text=True, cwd=source)
    assert result.returncode == 0, f"release {version} failed:\n{result.stderr[-4000:]}"
    timings = [line for line in result.stderr.splitlines() if ": done in " in line]
    print(f"\n[release] {version} made, pushed and signed in {time.monotonic() - started:.0f}s:\n  " +
          "\n  ".join(timings))  # fmt: skip
    return json.loads((out / "release.json").read_text())


def by_digest(entry: dict) -> str:
    return f"{entry['ref'].removeprefix('oci://').rsplit(':', 1)[0]}@{entry['digest']}"


def test_the_registry_holds_both_releases_with_their_signatures(access, releases) -> None:
    listing = {}
    for repository in ("reward-operator", "reward-operator-vllm-cpu", "charts/reward-operator"):
        listed = run(binary("crane"), "ls", f"{access.address}/{PATH}/{repository}", env=go_env(access)).stdout.split()
        listing[repository] = listed
        assert {PREVIOUS, NEW} <= set(listed), (repository, listed)
        # cosign's signatures and attestations by the referrers tag schema (distribution 2.8 has no referrers API)
        assert any(tag.startswith("sha256-") for tag in listed), (repository, listed)
    manifest = json.loads(
        run(binary("crane"), "manifest", by_digest(releases[NEW]["chart"]), env=go_env(access)).stdout
    )
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.helm.config.v1+json", manifest
    print("\n[release] crane ls:\n" + "\n".join(f"  {name}: {' '.join(tags)}" for name, tags in listing.items()))


def test_cosign_verifies_every_image_the_chart_and_the_sboms(access, keys, releases) -> None:
    env, public = go_env(access), str(keys["release"] / "cosign.pub")
    release = releases[NEW]
    report = []
    for entry in [*release["images"].values(), release["chart"]]:
        ref = by_digest(entry)
        verified = run(binary("cosign"), "verify", "--key", public, "--insecure-ignore-tlog", ref, env=env)
        claims = json.loads(verified.stdout)  # cosign's verified claims, a JSON list
        assert {claim["critical"]["image"]["docker-manifest-digest"] for claim in claims} == {entry["digest"]}, claims
        report.append(f"  {ref}: verified ({verified.stderr.strip().splitlines()[0] if verified.stderr else 'ok'})")
        refused = run(binary("cosign"), "verify", "--key", str(keys["other"] / "cosign.pub"), "--insecure-ignore-tlog",
                      ref, env=env, check=False)  # fmt: skip
        assert refused.returncode != 0, f"another key verified {ref}"
    for entry in release["images"].values():
        attested = run(binary("cosign"), "verify-attestation", "--key", public, "--insecure-ignore-tlog", "--type",
                       "spdxjson", by_digest(entry), env=env)  # fmt: skip
        assert attested.stdout.strip(), attested
        report.append(f"  {by_digest(entry)}: SPDX SBOM attestation verified")
    print("\n[release] cosign verify:\n" + "\n".join(report))


def test_another_image_pushed_under_the_release_tag_fails_verification(access, keys, releases) -> None:
    env = go_env(access)
    tag = releases[NEW]["images"]["reward-operator"]["ref"]
    # an image of the same layers with one more label: another digest, which nobody signed
    run(binary("crane"), "mutate", tag, "--label", "tampered=yes", "-t", tag, env=env)
    moved = run(binary("crane"), "digest", tag, env=env).stdout.strip()
    assert moved != releases[NEW]["images"]["reward-operator"]["digest"]
    refused = run(binary("cosign"), "verify", "--key", str(keys["release"] / "cosign.pub"), "--insecure-ignore-tlog",
                  tag, env=env, check=False)  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    print(f"\n[release] {tag} pushed over ({moved}); cosign verify: {refused.stderr.strip().splitlines()[-1]}")


def node_images() -> list[str]:
    listed = subprocess.run(
        [str(builds.bin_dir() / "ctr"), "--address", str(node.CONTAINERD_SOCKET), "-n", "k8s.io", "images", "ls", "-q"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(name for name in listed if "reward-operator" in name and "testenv" not in name)


# Run in the client pod: rewards asked one after another until the file named appears; the counts as JSON.
STEADY = textwrap.dedent(
    """
    import json, os, sys, time, urllib.request
    url, body, stop = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
    sent = answered = 0
    failures = []
    while not os.path.exists(stop):
        sent += 1
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                json.load(answer)
                answered += 1
        except Exception as error:
            failures.append("%.1f %s: %s" % (time.time(), type(error).__name__, str(error)[:160]))
    print(json.dumps({"sent": sent, "answered": answered, "failed": len(failures), "failures": failures[:20]}))
    """
)


def pods_by_component(cluster, namespace: str, name: str) -> dict[str, list[dict]]:
    listed = get_json(cluster, "pods", "-n", namespace, "-l", f"{ISVC_LABEL}={name}")["items"]
    found: dict[str, list[dict]] = {}
    for pod in listed:
        if not pod["metadata"].get("deletionTimestamp"):
            found.setdefault(pod["metadata"]["labels"].get("component", ""), []).append(pod)
    return found


def test_install_from_oci_then_upgrade_under_traffic(
    cluster, access, releases, model_uris, references, tmp_path
) -> None:
    before = node_images()
    assert not before, f"the node had our images before the install: {before}"
    env = cluster.env() | {"HELM_REGISTRY_CONFIG": str(tmp_path / "helm-registry.json")}
    helm = helm_binary()
    login = subprocess.run([str(helm), "registry", "login", access.address, "--username", access.username,
                            "--password-stdin", "--ca-file", str(access.ca_file)],
                           input=access.password, capture_output=True, text=True, env=env)  # fmt: skip
    assert login.returncode == 0, login.stderr
    secret = registry_addon.pull_secret(access.address, access.username, access.password, name="registry-pull")
    namespace = f"ro-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({**secret, "metadata": {
        **secret["metadata"], "namespace": namespace}}))  # fmt: skip
    # only the pull secret and the real node's placement: the registry and the digests are the chart's defaults
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "imagePullSecrets": [{"name": "registry-pull"}],
        "nodeSelector": {node.LABEL[0]: node.LABEL[1]},
        "tolerations": [{"key": node.TAINT["key"], "operator": "Exists", "effect": node.TAINT["effect"]}],
    }))  # fmt: skip
    chart = f"oci://{access.address}/{PATH}/charts/reward-operator"
    try:
        started = time.monotonic()
        run_helm(helm, "install", RELEASE, chart, "--version", PREVIOUS, "-n", namespace, "-f", str(values),
                 "--ca-file", str(access.ca_file), "--take-ownership", "--wait", "--timeout=600s", env=env)  # fmt: skip
        installed_after = time.monotonic() - started
        operator_image = releases[PREVIOUS]["images"]["reward-operator"]
        with served.client_namespace(cluster, image=f"{operator_image['ref']}@{operator_image['digest']}",
                                     pull_secret=secret) as models:  # fmt: skip
            # the references apply the spec's chat template (scoring_cases); vLLM applies it here
            spec = reward_model("seq", "sequence", model_uris["sequence"], 0, model={"chatTemplate": SPEC_TEMPLATE})
            # room on the node's 2 cores for the rolling upgrade's surge: a second gateway (250m) and a second
            # operator pod beside the first ones, as a cluster keeps headroom for a rollout
            spec["spec"]["resources"]["cpu"] = "1200m"
            served_model = serve(cluster, models, spec)
            url = served_model["status"]["url"]
            body = {"items": [{"prompt": PROMPT, "response": RESPONSE}]}
            answer = rewards(cluster, models, url, "/v1/rewards", body)
            assert_close(answer["rewards"], [references["sequence"]["prompt_response"]["reward"]])
            after_install = node_images()
            print(f"\n[release] installed {PREVIOUS} from {chart} in {installed_after:.0f}s; reward {answer['rewards']}"
                  f" through {url}, transformers' {references['sequence']['prompt_response']['reward']:.6f}\n"
                  f"  ctr images ls before: {before or 'none of ours'}\n  after: {after_install}")  # fmt: skip
            assert any("reward-operator-vllm-cpu" in name for name in after_install), after_install
            assert any("/reward-operator:" in name or "/reward-operator@" in name for name in after_install)

            pods_before = pods_by_component(cluster, models, "seq")
            traffic = subprocess.Popen(
                [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "exec", "-n", models,
                 served.CLIENT, "--", "python", "-c", STEADY, url.rstrip("/") + "/v1/rewards", json.dumps(body),
                 "/tmp/stop"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                started = time.monotonic()
                run_helm(helm, "upgrade", RELEASE, chart, "--version", NEW, "-n", namespace, "-f", str(values),
                         "--ca-file", str(access.ca_file), "--wait", "--timeout=600s", env=env)  # fmt: skip
                upgraded_after = time.monotonic() - started
                new_gateway = releases[NEW]["images"]["reward-operator"]["digest"]

                def gateway_replaced() -> bool:
                    pods = pods_by_component(cluster, models, "seq").get("transformer", [])
                    return bool(pods) and all(
                        new_gateway in pod["spec"]["containers"][0]["image"]
                        and all(status.get("ready") for status in pod["status"].get("containerStatuses", [{}]))
                        for pod in pods
                    )

                wait_until("the gateway on the new release's image", gateway_replaced, timeout=600, interval=2)
                replaced_after = time.monotonic() - started
            finally:
                cluster.kubectl("exec", "-n", models, served.CLIENT, "--", "python", "-c",
                                "open('/tmp/stop', 'w').close()", check=False)  # fmt: skip
                out, err = traffic.communicate(timeout=180)
            counts = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"error": err}
            pods_after = pods_by_component(cluster, models, "seq")
            kept = {
                component: {p["metadata"]["uid"] for p in pods_before.get(component, [])}
                == {p["metadata"]["uid"] for p in pods_after.get(component, [])}
                for component in ("predictor", "transformer")
            }
            operator_pods = get_json(cluster, "pods", "-n", namespace, "-l",
                                     "app.kubernetes.io/component=operator")["items"]  # fmt: skip
            crd = get_json(cluster, "crd", "rewardmodels.serving.rlhf.dev")
            print(f"[release] helm upgrade to {NEW} in {upgraded_after:.0f}s, the gateway replaced "
                  f"{replaced_after:.0f}s after it began; requests during it: sent {counts.get('sent')}, answered "
                  f"{counts.get('answered')}, failed {counts.get('failed')}; pods kept: {kept}; CRD labelled "
                  f"{crd['metadata']['labels'].get('helm.sh/chart')}")  # fmt: skip
            assert counts.get("failed") == 0 and counts.get("sent", 0) > 0, counts
            assert kept == {"predictor": True, "transformer": False}, (pods_before, pods_after)
            assert crd["metadata"]["labels"].get("helm.sh/chart") == f"reward-operator-{NEW}", crd["metadata"]
            signed = releases[NEW]["images"]["reward-operator"]["digest"]
            for pod in operator_pods:
                if not pod["metadata"].get("deletionTimestamp"):
                    (status,) = pod["status"]["containerStatuses"]
                    assert status["imageID"].endswith(signed), (status, signed)
            finished(cluster, models, "seq")
    finally:
        run_helm(helm, "uninstall", RELEASE, "-n", namespace, "--wait", "--timeout=120s", env=env, check=False)
        delete_cluster_objects(cluster, RELEASE)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
