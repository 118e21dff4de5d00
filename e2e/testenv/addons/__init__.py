"""Every optional component of the control plane: one kind of thing, an ``AddOn`` (``testenv.plane.addon``).

The add-ons, by name: ``node`` (the real node, ``testenv.node``), ``kserve`` (KServe's manager), ``localmodel``
(KServe's LocalModel controller and node agents), ``knative`` (Knative Serving and Kourier as pods on the real
node, for KServe's Knative mode), ``keda`` (KEDA's operator and metrics API server),
``kube-router`` (NetworkPolicies enforced on the real node), ``prometheus`` (prometheus-operator, whose
Prometheus runs on the real node), ``object-store`` (versitygw, an S3-compatible store the real node's pods
reach, with a Secret of its keys in KServe's convention), ``kueue`` (Kueue's manager and webhooks, which queue a
RewardBatch's Job), ``registry`` (distribution with TLS and basic auth, from which the real node pulls our
released images). ``choose`` decides which run from what is asked, the environment and each one's defaults, in
their start order; ``host_state`` is the host as they may change it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..node import RealNode
from ..node.host import host_state as _host_state
from ..plane.addon import AddOn, Leftovers
from .keda import Keda
from .knative import Knative
from .kserve import KServeManager
from .kube_router import KubeRouter
from .kueue import Kueue
from .localmodel import LocalModel
from .object_store import ObjectStoreAddOn
from .prometheus import PrometheusOperator
from .registry import RegistryAddOn

# Every kind, in the order they start where nothing else decides it (``requires`` and ``after`` do); each one
# after those it ``comes_with``
KINDS: tuple[type[AddOn], ...] = (
    RealNode,
    KServeManager,
    LocalModel,
    Knative,
    Keda,
    KubeRouter,
    PrometheusOperator,
    ObjectStoreAddOn,
    Kueue,
    RegistryAddOn,
)
BY_NAME: dict[str, type[AddOn]] = {kind.name: kind for kind in KINDS}


def choose(asked: Mapping[str, bool | None] | None = None, kinds: tuple[type[AddOn], ...] = KINDS) -> list[AddOn]:
    """The add-ons that run, in their start order: each one as ``asked`` (by name; None: not asked), else as its
    environment variable says (TESTENV_<NAME>), else its default (or on where one of ``comes_with`` runs);
    then what those require, whatever the environment says of them (an add-on asked off by name that another
    requires is an error)."""
    asked = dict(asked or {})
    by_name = {kind.name: kind for kind in kinds}
    if unknown := set(asked) - by_name.keys():
        raise ValueError(f"unknown add-on(s) {', '.join(sorted(unknown))}; known: {', '.join(by_name)}")
    on: dict[str, bool] = {}
    for kind in kinds:  # what a kind comes with is listed before it
        choice = asked.get(kind.name)
        if choice is None:
            choice = kind.asked_by_env()
        if choice is None:
            choice = kind.default or any(on.get(other, False) for other in kind.comes_with)
        on[kind.name] = choice
    pending = [name for name, runs in on.items() if runs]
    while pending:
        for needed in by_name[pending.pop()].requires:
            if not on.get(needed):
                if asked.get(needed) is False:
                    wanting = [kind.name for kind in kinds if on.get(kind.name) and needed in kind.requires]
                    raise ValueError(f"{', '.join(wanting)} need(s) {needed}, which was asked not to run")
                on[needed] = True
                pending.append(needed)
    return [kind() for kind in _ordered(kinds, {name for name, runs in on.items() if runs})]


def _ordered(kinds: tuple[type[AddOn], ...], names: set[str]) -> list[type[AddOn]]:
    """``kinds`` named in ``names``, each after what it requires and what it starts ``after`` (when they run),
    otherwise in the order of ``kinds``."""
    chosen = [kind for kind in kinds if kind.name in names]
    done: list[type[AddOn]] = []
    while chosen:
        ready = next(
            (
                kind
                for kind in chosen
                if all(other in {k.name for k in done} for other in (*kind.requires, *kind.after) if other in names)
            ),
            None,
        )
        if ready is None:
            raise ValueError(f"add-ons wait on each other: {', '.join(kind.name for kind in chosen)}")
        done.append(ready)
        chosen.remove(ready)
    return done


def leftovers(kinds: tuple[type[AddOn], ...] = KINDS) -> Leftovers:
    """What every add-on leaves on the host after its processes: the real node's cleanup removes all of it."""
    union = Leftovers()
    for kind in kinds:
        union |= kind.leftovers
    return union


def host_state() -> dict:
    """What the real node and the add-ons beside it may change on the host, for comparing before ``up`` and after
    ``down`` (``testenv.node.host_differences``)."""
    return _host_state(leftovers())
