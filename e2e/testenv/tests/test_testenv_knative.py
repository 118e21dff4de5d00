"""Knative's manifests as the test bed runs them (testenv.addons.knative), read from the pinned modules without a
cluster: every pod's image is one built here, every pod is pinned to the real node, and the settings KServe's
Knative mode needs without Istio are set, while the rest stays as Knative ships it; and where the add-on runs."""

from __future__ import annotations

import json

import pytest

from reward_testing import versions
from testenv import addons, builds, images
from testenv.addons import knative, kserve
from testenv.node import facts


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    return knative.manifests()


def by_kind(documents: list[dict], kind: str) -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == kind}


def test_knative_runs_wherever_the_real_node_runs_unless_asked_not_to(monkeypatch):
    monkeypatch.delenv("TESTENV_KNATIVE", raising=False)
    monkeypatch.delenv("TESTENV_NODE", raising=False)
    assert "knative" in [add_on.name for add_on in addons.choose()]
    assert "knative" not in [add_on.name for add_on in addons.choose({"node": False})]
    monkeypatch.setenv("TESTENV_KNATIVE", "0")
    assert "knative" not in [add_on.name for add_on in addons.choose()]
    # asked for by name, it brings the node it runs on
    assert [add_on.name for add_on in addons.choose({"knative": True, "kserve": False})] == ["node", "knative"]


def test_knative_is_built_and_its_envoy_image_made_by_default_as_the_node_runs_it():
    assert "knative" in {c.module_dir for c in builds.CATALOGUE.select()}
    assert knative.Knative.build_components == ("knative",)
    assert "envoy" in {image.name for image in images.CATALOGUE.select()}
    assert set(knative.Knative.images) == {image.name for image in images.catalogue.KNATIVE_IMAGES}


def test_every_knative_pod_runs_an_image_built_here_on_the_real_node(manifests):
    built = {images.BY_NAME[name].ref for name in knative.IMAGES}
    deployments = by_kind(manifests, "Deployment")
    assert set(deployments) == {name for names in knative.DEPLOYMENTS.values() for name in names}
    for name, deployment in deployments.items():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] in built, (name, container["image"])
            assert container["resources"]["requests"]["cpu"] == knative.SYSTEM_CPU_REQUEST
    assert "ko://" not in json.dumps(manifests)
    pinned = facts.namespace_for_real_node("x")["metadata"]["annotations"]
    namespaces = by_kind(manifests, "Namespace")
    assert set(namespaces) == {knative.NAMESPACE, knative.GATEWAY_NAMESPACE}
    for namespace in namespaces.values():
        assert pinned.items() <= namespace["metadata"]["annotations"].items()
    # every Deployment's namespace is one of those: no Knative pod lands on kwok's fake nodes
    assert {d["metadata"]["namespace"] for d in deployments.values()} <= set(namespaces)


def test_the_settings_kserves_knative_mode_needs_without_istio(manifests):
    configs = by_kind(manifests, "ConfigMap")
    assert configs["config-network"]["data"]["ingress-class"] == knative.INGRESS_CLASS
    assert configs["config-domain"]["data"][knative.DOMAIN] == ""
    deployment = configs["config-deployment"]["data"]
    assert deployment["queue-sidecar-image"] == images.BY_NAME["knative-queue"].ref
    assert "index.docker.io" in deployment["registries-skipping-tag-resolving"].split(",")
    # the rest as Knative ships it: the autoscaler's defaults, its example block
    assert "_example" in configs["config-autoscaler"]["data"]
    assert set(configs["config-autoscaler"]["data"]) == {"_example"}


def test_knatives_admission_webhooks_come_after_the_configmaps_they_validate(manifests):
    kinds = [doc["kind"] for doc in manifests]
    last_configmap = max(i for i, kind in enumerate(kinds) if kind == "ConfigMap")
    first_webhook = min(i for i, kind in enumerate(kinds) if kind.endswith("WebhookConfiguration"))
    assert last_configmap < first_webhook
    assert kinds.index("ConfigMap") < kinds.index("Deployment")


def test_the_crds_include_the_files_the_module_zips_drop():
    names = {crd["metadata"]["name"] for crd in knative.crds()}
    assert {
        "services.serving.knative.dev",
        "revisions.serving.knative.dev",
        "podautoscalers.autoscaling.internal.knative.dev",
        # linked from knative.dev/networking and knative.dev/caching in serving's repository
        "ingresses.networking.internal.knative.dev",
        "serverlessservices.networking.internal.knative.dev",
        "certificates.networking.internal.knative.dev",
        "images.caching.internal.knative.dev",
    } <= names


def test_the_envoy_built_here_is_the_release_kouriers_gateway_expects(monkeypatch):
    monkeypatch.setattr(versions, "ENVOY", "1.37.0")
    with pytest.raises(ValueError, match=r"expects Envoy 1\.36"):
        knative.manifests()


def test_kserve_publishes_each_components_route_instead_of_istios_local_gateway():
    config = knative.kserve_config(kserve.inference_service_config())
    ingress = json.loads(config["data"]["ingress"])
    assert ingress["disableIstioVirtualHost"] is True
    shipped = json.loads(kserve.inference_service_config()["data"]["ingress"])
    assert {k: v for k, v in ingress.items() if k != "disableIstioVirtualHost"} == {
        k: v for k, v in shipped.items() if k != "disableIstioVirtualHost"
    }
