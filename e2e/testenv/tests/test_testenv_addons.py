"""Which add-ons a control plane runs and in what order, and what they leave on the host: decided from what is
asked, the environment and each add-on's own declarations, without a control plane."""

from __future__ import annotations

import pytest

from testenv import addons
from testenv.node.host import NODE_LEFTOVERS
from testenv.plane.addon import AddOn, Leftovers


@pytest.fixture(autouse=True)
def no_asks_in_the_environment(monkeypatch):
    for kind in addons.KINDS:
        monkeypatch.delenv(kind.env(), raising=False)


def names(chosen: list[AddOn]) -> list[str]:
    return [add_on.name for add_on in chosen]


def test_the_defaults_are_the_real_node_kserve_and_knative_on_the_node():
    assert names(addons.choose()) == ["node", "kserve", "knative"]


def test_the_environment_asks_and_what_is_asked_by_name_wins(monkeypatch):
    monkeypatch.setenv("TESTENV_NODE", "0")
    monkeypatch.setenv("TESTENV_KEDA", "1")
    assert names(addons.choose()) == ["kserve", "keda"]
    assert names(addons.choose({"node": True, "keda": False})) == ["node", "kserve", "knative"]


def test_what_an_add_on_requires_runs_too_and_starts_before_it(monkeypatch):
    monkeypatch.setenv("TESTENV_KSERVE", "0")
    # LocalModel needs KServe's manager; kube-router and prometheus-operator the real node
    assert names(addons.choose({"node": False, "localmodel": True})) == ["kserve", "localmodel"]
    assert names(addons.choose({"kube-router": True, "prometheus": True, "knative": False})) == [
        "node",
        "kube-router",
        "prometheus",
    ]


def test_an_add_on_asked_off_that_another_requires_is_refused():
    with pytest.raises(ValueError, match=r"kube-router need.*node, which was asked not to run"):
        addons.choose({"node": False, "kube-router": True})
    with pytest.raises(ValueError, match=r"unknown add-on.*istio"):
        addons.choose({"istio": True})


class Mesh(AddOn):
    """An add-on of the shape Knative's would have: on wherever the real node runs, before KServe's manager."""

    name = "mesh"
    title = "a mesh"
    comes_with = ("node",)
    requires = ("node",)
    leftovers = Leftovers(chain_prefixes=("MESH-",), paths=("/run/mesh",), binaries=("mesh-controller",))


class Serving(AddOn):
    name = "serving"
    title = "a server"
    default = True
    after = ("mesh",)


def test_an_add_on_comes_with_another_and_orders_itself_after_it_only_where_it_runs(monkeypatch):
    kinds = (addons.BY_NAME["node"], Mesh, Serving)
    assert names(addons.choose(kinds=kinds)) == ["node", "mesh", "serving"]
    assert names(addons.choose({"node": False}, kinds=kinds)) == ["serving"]
    # listed after it, it starts after it all the same
    assert names(addons.choose(kinds=(addons.BY_NAME["node"], Serving, Mesh))) == ["node", "mesh", "serving"]
    monkeypatch.setenv("TESTENV_MESH", "0")  # its opt-out
    assert names(addons.choose(kinds=kinds)) == ["node", "serving"]


def test_the_cleanup_takes_every_add_ons_leftovers_and_the_node_names_no_other():
    union = addons.leftovers((*addons.KINDS, Mesh))
    assert set(NODE_LEFTOVERS.chain_prefixes) <= set(union.chain_prefixes) and "MESH-" in union.chain_prefixes
    assert "/run/mesh" in union.paths and "mesh-controller" in union.binaries
    # kube-router's sets and binary come from its own declaration, not the node's
    assert "KUBE-SRC-" in addons.leftovers().ipset_prefixes and "kube-router" in addons.leftovers().binaries
    assert not NODE_LEFTOVERS.ipset_prefixes and "kube-router" not in NODE_LEFTOVERS.binaries


def test_every_process_name_is_an_add_ons_own():
    processes = [process for kind in addons.KINDS for process in kind.processes]
    assert len(processes) == len(set(processes))
