"""KServe's LocalModel controller (``cmd/localmodel``) and node agents on the local control plane, for spec.cache.

Opt-in (``TESTENV_LOCALMODEL=1``, ``python -m testenv up --localmodel`` or
``ControlPlane.up(localmodel=True)``; the test session's control plane has it where it has the real node,
and the ``localmodel_cluster`` fixture brings one with it for the kwok cache tests), since only the cache
tests need it. Set up as KServe's own
install sets it up: ``localModel.enabled: true`` in ``inferenceservice-config`` (the manager's
defaulting webhook then binds InferenceServices to caches), the job namespace, the controller with
its validating webhook for LocalModelCaches (KServe v0.20 ships a webhook configuration for that kind
only), and one ``LocalModelNodeGroup`` over the two kwok GPU nodes (they carry
``serving.kserve.io/nodegroup: gpu``).

The controller makes a ``LocalModelNode`` per node of a cache's groups and sums their status into
the cache's (``status.copies``, ``status.nodeStatus``). That node status is written by KServe's node
agent, one per GPU node as its DaemonSet would run (``go/kserve/localmodelnode``: KServe's reconciler,
with an entry point that lets several share one host). Each agent has a disk of its own
(``NodeDisk``): it runs in a mount namespace whose ``/mnt`` is that node's folder, as KServe's agent
reads the models under the fixed ``/mnt/models``. It starts a download Job per model, checks the
model's folder on its disk and reports per model; ``localmodel_downloads`` stands in for the download
container kwok cannot run.

Where the real node runs (``testenv.node``), it is a node group of its own, ``real``, with an agent
too, and nothing stands in there: the agent's download Job runs KServe's storage initializer (the image
built here) on the node, which fetches the model from the test bed's storage server into the group's
local volume, a folder of the node's disk; a predictor there mounts it and vLLM loads the model from it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from reward_testing.ports import free_port

from .. import node as real_node
from ..plane.addon import AddOn, Plane, log, wait_by
from . import kserve

E2E = Path(__file__).resolve().parents[2]  # the folder holding the testenv package

NAME = "kserve-localmodel"  # process name in the State, and binary name
PORTS = ("localmodel-metrics", "localmodel-health", "localmodel-webhook")
JOB_NAMESPACE = "kserve-localmodel-jobs"
NODE_GROUP = "gpu"
NODE_GROUP_LABEL = "serving.kserve.io/nodegroup"
REAL_NODE_GROUP = "real"  # the real node's group: its volume is a folder of that node's disk
AGENT = "kserve-localmodelnode"  # binary name; each agent's process is named f"{AGENT}-{node}"
DOWNLOADS = "node-downloads"  # process name of the stand-in for the download container
# KServe's agent keeps its models under /mnt/models/models (MountPath and modelsRootFolder in
# pkg/controller/v1alpha1/localmodelnode); the node group's volume below is /mnt/models on each node
NODE_ROOT = PurePosixPath("/mnt")
AGENT_MODELS = PurePosixPath("/mnt/models/models")


def enable_in_config(config: dict) -> dict:
    """KServe's inferenceservice-config with localModel.enabled: true (everything else as shipped)."""
    settings = json.loads(config["data"]["localModel"])
    settings["enabled"] = True
    config["data"]["localModel"] = json.dumps(settings, indent=2)
    return config


def webhook_configurations(port: int, ca_bundle: bytes) -> list[dict]:
    return kserve.webhook_configurations(port, ca_bundle, "localmodel/manifests.yaml")


def node_group(name: str, local_path: str, node_label: tuple[str, str]) -> dict:
    """A LocalModelNodeGroup whose volume is ``local_path`` on each node labelled ``node_label``."""
    key, value = node_label
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LocalModelNodeGroup",
        "metadata": {"name": name},
        "spec": {
            "storageLimit": "100Gi",
            "persistentVolumeSpec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "100Gi"},
                "storageClassName": "local-models",
                "persistentVolumeReclaimPolicy": "Delete",
                "local": {"path": local_path},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]
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


def objects(real_node_disk: NodeDisk | None = None) -> list[dict]:
    """The job namespace and the node group over the kwok GPU nodes (a local volume on each); with
    the real node, its own group too, whose volume is a folder of its disk (the kubelet mounts that
    path: the node is this host), and the job namespace's pods tolerate its taint (each download Job
    names its node)."""
    namespace: dict = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": JOB_NAMESPACE}}
    groups = [node_group(NODE_GROUP, str(NODE_ROOT / "models"), (NODE_GROUP_LABEL, NODE_GROUP))]
    if real_node_disk is not None:
        tolerated = real_node.namespace_for_real_node(JOB_NAMESPACE)["metadata"]["annotations"]
        toleration = "scheduler.alpha.kubernetes.io/defaultTolerations"
        namespace["metadata"]["annotations"] = {toleration: tolerated[toleration]}
        volume = real_node_disk.path_of(NODE_ROOT / "models")
        groups.append(node_group(REAL_NODE_GROUP, str(volume), real_node.LABEL))
    return [namespace, *groups]


def probe_cache() -> dict:
    """A LocalModelCache for a server dry run: accepted only once the controller's webhook answers."""
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LocalModelCache",
        "metadata": {"name": "testenv-webhook-probe"},
        "spec": {"sourceModelUri": "hf://testenv/probe", "modelSize": "1Gi", "nodeGroups": [NODE_GROUP]},
    }


def gpu_nodes(fake_nodes: list[dict]) -> list[str]:
    """The fake nodes in the node group: where KServe's DaemonSet would run an agent."""
    in_group = [node for node in fake_nodes if node["metadata"]["labels"].get(NODE_GROUP_LABEL) == NODE_GROUP]
    return [node["metadata"]["name"] for node in in_group]


@dataclass(frozen=True)
class Control:
    """How a node's downloads go (``NodeDisk``): through (the default), held, or failing."""

    held: bool = False
    failure: str = ""


class NodeDisk:
    """One kwok node's disk: ``root`` is what its agent and its download pods see as ``/mnt``."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.root = directory / "mnt"
        self._control = directory / "downloads.json"

    @property
    def node(self) -> str:
        return self.directory.name

    def path_of(self, node_path: PurePosixPath) -> Path:
        """Where a path on the node lies in this folder (only paths under /mnt are on its disk)."""
        if not self.root.is_dir():
            raise LookupError(f"node {self.node} has no disk in the test bed ({self.root})")
        if not node_path.is_relative_to(NODE_ROOT) or ".." in node_path.parts:
            raise LookupError(f"{node_path} is not on node {self.node}'s disk (only {NODE_ROOT} is)")
        return self.root.joinpath(*node_path.relative_to(NODE_ROOT).parts)

    def cached_uris(self) -> set[str]:
        """The models on this node's disk where KServe's agent looks for them: the source URI of each
        folder (``localmodel_downloads`` writes it into the folder's config.json)."""
        folder = self.path_of(AGENT_MODELS)
        configs = folder.glob("*/config.json") if folder.is_dir() else []
        return {json.loads(config.read_text())["_name_or_path"] for config in configs}

    def control(self) -> Control:
        try:
            return Control(**json.loads(self._control.read_text()))
        except FileNotFoundError:
            return Control()

    def hold_downloads(self) -> None:
        """Download pods started on this node keep running, as a long download would."""
        self._set(Control(held=True))

    def fail_downloads(self, message: str) -> None:
        """Download pods on this node fail with ``message`` (a full disk, an unreachable bucket)."""
        self._set(Control(failure=message))

    def let_downloads_through(self) -> None:
        self._set(Control())

    def _set(self, control: Control) -> None:
        scratch = self._control.with_suffix(".tmp")
        scratch.write_text(json.dumps({"held": control.held, "failure": control.failure}))
        scratch.replace(self._control)  # the downloader never reads half a file


def node_disks(state_dir: Path, nodes: list[str]) -> dict[str, NodeDisk]:
    """Each node's disk under a control plane's folder, made if missing."""
    disks = {node: NodeDisk(state_dir / "nodes" / node) for node in nodes}
    for disk in disks.values():
        disk.root.mkdir(parents=True, exist_ok=True)
    return disks


def real_node_disk(state_dir: Path) -> NodeDisk:
    """The real node's disk: made, with its volume folder writable by the download container.

    The kubelet makes each download's sub path with the mode of the volume's folder, and KServe's
    storage initializer writes as UID 1000 (its image's user): the folder is open to it as a
    cluster admin would prepare a node's model disk for that user."""
    disk = node_disks(state_dir, [real_node.NAME])[real_node.NAME]
    volume = disk.path_of(NODE_ROOT / "models")
    volume.mkdir(parents=True, exist_ok=True)
    volume.chmod(0o777)
    return disk


def agent_command(binary: Path, kubeconfig: str, disk: NodeDisk, probe_port: int) -> list[str]:
    """KServe's node agent for ``disk``'s node, in a mount namespace whose /mnt is that disk.

    As root a private mount namespace is enough; otherwise a user namespace maps the user to root
    inside it (unprivileged user namespaces must be allowed)."""
    isolate = ["--mount", "--propagation", "private"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    return [
        "unshare", *isolate, "--",
        "sh", "-c", f'mount --bind "$0" {NODE_ROOT} && exec "$@"', str(disk.root),
        str(binary), f"--kubeconfig={kubeconfig}", f"--health-probe-addr=127.0.0.1:{probe_port}",
    ]  # fmt: skip


def downloads_ready(nodes_dir: Path) -> Path:
    """Made by ``localmodel_downloads`` once it has listed the job namespace's pods."""
    return nodes_dir / "downloads.ready"


def downloads_command(python: str, kubeconfig: str, nodes_dir: Path) -> list[str]:
    return [python, "-m", "testenv.addons.localmodel_downloads", f"--kubeconfig={kubeconfig}", f"--nodes={nodes_dir}"]


class LocalModel(AddOn):
    """The add-on: after KServe's manager (whose ConfigMap it reads at start); ready once its webhook
    admits a dry-run cache and every GPU node's agent and the download stand-in listen."""

    name = "localmodel"
    title = f"KServe {kserve.KSERVE_VERSION} LocalModel controller"
    requires = ("kserve",)  # its manager's defaulting webhook binds InferenceServices to caches
    after = ("node",)  # the real node's disk is a node group of its own
    probe = (f"localmodelnodegroup/{NODE_GROUP}", f"no LocalModelNodeGroup {NODE_GROUP} (KServe's LocalModel)")
    processes = (NAME,)  # the agents and the download stand-in are named per node: down stops them first

    def __init__(self) -> None:
        self.started = 0.0

    def kserve_config(self, config: dict) -> dict:
        return enable_in_config(config)

    def start(self, plane: Plane, deadline: float) -> None:
        """KServe's LocalModel controller with its serving certificate."""
        self.started = time.monotonic()
        log(f"starting KServe {kserve.KSERVE_VERSION} LocalModel controller")
        for name in PORTS:
            plane.state.ports[name] = free_port()
        scratch = plane.directory / NAME
        kserve.serving_certificate(plane.keys, kserve.cert_dir(scratch))
        command = kserve.manager_command(plane.bin / NAME, plane.state.kubeconfig, plane.state.ports, "localmodel")
        plane.spawn(NAME, command, env=kserve.manager_env(scratch))

    def wait(self, plane: Plane, deadline: float) -> None:
        """Its health, its webhook, the job namespace and node groups, then the node agents."""
        ports = plane.state.ports
        plane.wait_healthy(f"http://127.0.0.1:{ports['localmodel-health']}/healthz", deadline, NAME, tls=False)
        hooks = webhook_configurations(ports["localmodel-webhook"], plane.keys.ca_cert.read_bytes())
        real_disk = real_node_disk(plane.directory) if plane.running("node") else None
        plane.kubectl("apply", "--server-side", "--field-manager=testenv", "-f", "-",
                      input=yaml.safe_dump_all([*hooks, *objects(real_disk)]))  # fmt: skip
        probe = json.dumps(probe_cache())

        def validated() -> bool:
            plane.fail_if_exited(NAME)
            return plane.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).returncode == 0

        wait_by(deadline, "KServe's LocalModelCache webhook (a dry-run cache admitted)", validated)
        log(f"LocalModel controller and webhook ready {time.monotonic() - self.started:.1f}s after its start")
        self._start_node_agents(plane, deadline, real_disk)

    @staticmethod
    def _start_node_agents(plane: Plane, deadline: float, real_disk: NodeDisk | None) -> None:
        """KServe's LocalModel node agent on each GPU node (and the real node), each with a disk of its
        own, and the stand-in for the kwok nodes' download pods' container (see ``localmodel_downloads``)."""
        disks = node_disks(plane.directory, gpu_nodes(plane.fake_nodes()))
        if real_disk is not None:
            disks[real_disk.node] = real_disk
        nodes = list(disks)
        log(f"starting KServe's LocalModel node agents on {', '.join(nodes)} (a private /mnt each)")
        python_path = [str(E2E), str(E2E.parent / "testing"), os.environ.get("PYTHONPATH", "")]
        plane.spawn(
            DOWNLOADS,
            downloads_command(sys.executable, plane.state.kubeconfig, plane.directory / "nodes"),
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, python_path))),
        )
        for node, disk in disks.items():
            port = plane.state.ports[f"{AGENT}-{node}"] = free_port()
            plane.spawn(f"{AGENT}-{node}", agent_command(plane.bin / AGENT, plane.state.kubeconfig, disk, port),
                        env=dict(os.environ, NODE_NAME=node))  # fmt: skip
        for node in nodes:
            name = f"{AGENT}-{node}"
            plane.wait_healthy(f"http://127.0.0.1:{plane.state.ports[name]}/readyz", deadline, name, tls=False)

        def downloader_listening() -> bool:
            plane.fail_if_exited(DOWNLOADS)
            return downloads_ready(plane.directory / "nodes").exists()

        wait_by(deadline, "the download stand-in watching the job namespace", downloader_listening, interval=0.1)

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {NAME: (f"http://127.0.0.1:{ports.get('localmodel-health')}/healthz", False)}
