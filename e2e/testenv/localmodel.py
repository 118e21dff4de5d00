"""KServe's LocalModel controller (``cmd/localmodel``) on the local control plane, for spec.cache.

Opt-in (``TESTENV_LOCALMODEL=1``, ``python -m testenv up --localmodel`` or
``ControlPlane.up(localmodel=True)``; the ``localmodel_cluster`` fixture brings a control plane
with it where the session's has none), since only the cache tests need it. Set up as KServe's own
install sets it up: ``localModel.enabled: true`` in ``inferenceservice-config`` (the manager's
defaulting webhook then binds InferenceServices to caches), the job namespace, the controller with
its validating webhook for LocalModelCaches (KServe v0.20 ships a webhook configuration for that kind
only), and one ``LocalModelNodeGroup`` over the two kwok GPU nodes (they carry
``serving.kserve.io/nodegroup: gpu``).

The controller makes a ``LocalModelNode`` per node of a cache's groups and sums their status into
the cache's (``status.copies``, ``status.nodeStatus``). Writing that node status is the node agent's
job (``cmd/localmodelnode``, a DaemonSet, which downloads with Jobs and checks the files on the
node's disk); it has no node here, so tests stand in for it and write the node status themselves, as
kwok stands in for the kubelet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import kserve_manager

NAME = "kserve-localmodel"  # process name in the State, and binary name
PORTS = ("localmodel-metrics", "localmodel-health", "localmodel-webhook")
JOB_NAMESPACE = "kserve-localmodel-jobs"
NODE_GROUP = "gpu"
NODE_GROUP_LABEL = "serving.kserve.io/nodegroup"


def enabled_by_env() -> bool:
    return os.environ.get("TESTENV_LOCALMODEL", "0") == "1"


def enable_in_config(config: dict) -> dict:
    """KServe's inferenceservice-config with localModel.enabled: true (everything else as shipped)."""
    settings = json.loads(config["data"]["localModel"])
    settings["enabled"] = True
    config["data"]["localModel"] = json.dumps(settings, indent=2)
    return config


def controller_command(binary: Path, kubeconfig: str, ports: dict[str, int]) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--metrics-addr=127.0.0.1:{ports['localmodel-metrics']}",
        f"--health-probe-addr=127.0.0.1:{ports['localmodel-health']}",
        f"--webhook-port={ports['localmodel-webhook']}",
    ]


def webhook_configurations(port: int, ca_bundle: bytes) -> list[dict]:
    return kserve_manager.webhook_configurations(port, ca_bundle, "localmodel/manifests.yaml")


def objects() -> list[dict]:
    """The job namespace and the node group over the kwok GPU nodes (a local volume on each)."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": JOB_NAMESPACE}}
    node_group = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LocalModelNodeGroup",
        "metadata": {"name": NODE_GROUP},
        "spec": {
            "storageLimit": "100Gi",
            "persistentVolumeSpec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "100Gi"},
                "storageClassName": "local-models",
                "persistentVolumeReclaimPolicy": "Delete",
                "local": {"path": "/mnt/models"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": NODE_GROUP_LABEL, "operator": "In", "values": [NODE_GROUP]}]}
                        ]
                    }
                },
            },
            "persistentVolumeClaimSpec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "100Gi"}},
                "storageClassName": "local-models",
            },
        },
    }
    return [namespace, node_group]


def probe_cache() -> dict:
    """A LocalModelCache for a server dry run: accepted only once the controller's webhook answers."""
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LocalModelCache",
        "metadata": {"name": "testenv-webhook-probe"},
        "spec": {"sourceModelUri": "hf://testenv/probe", "modelSize": "1Gi", "nodeGroups": [NODE_GROUP]},
    }
