"""What a LocalModel download Job's container does on a kwok node: the model lands on the node's disk.

KServe's node agent (``testenv.addons.localmodel``, one per GPU node) starts a Job per model and node whose
container, KServe's storage initializer, writes the model into the node group's local volume; the
agent reports ``ModelDownloaded`` once the Job succeeded and the model's folder is on its disk. kwok
runs no containers, so this process stands in for that one container, as kwok stands in for the
kubelet: for each download pod kwok has started it writes the model's folder where the pod's volume
lies on that node's disk (``localmodel.NodeDisk``), then marks the pod with how the container ended;
kwok's stages (``kwok-stages.yaml``) turn the mark into the pod's ``Succeeded`` or ``Failed`` phase,
and Kubernetes' Job controller and KServe's agent take it from there.

The real node's download pods are left to its kubelet: KServe's storage initializer really runs there.

A test steers a kwok node's downloads through its ``NodeDisk``: held (the pod stays running, as a long
download would), failing with a message (a full disk, an unreachable bucket), or going through.

    python -m testenv.addons.localmodel_downloads --kubeconfig K --nodes DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path, PurePosixPath

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from ..node.facts import NAME as REAL_NODE
from .localmodel import JOB_NAMESPACE, NodeDisk, downloads_ready

ENDED = "testenv.rlhf.dev/download"  # "done" or "failed": what kwok's stages turn into the pod's phase
MESSAGE = "testenv.rlhf.dev/download-message"  # the failed container's termination message
RESCAN_SECONDS = 1  # a held download is looked at again this often (its node's control file changes)

log = logging.getLogger("node-downloads")


class Downloads:
    def __init__(self, core: client.CoreV1Api, nodes: Path):
        self.core = core
        self.nodes = nodes

    def run(self) -> None:
        log.info("downloading for the pods of %s onto the node disks under %s", JOB_NAMESPACE, self.nodes)
        ready = downloads_ready(self.nodes)
        while True:
            try:
                for pod in self.core.list_namespaced_pod(JOB_NAMESPACE).items:
                    self.handle(pod)
                ready.touch()
                # react to new pods at once; rescan what is held each RESCAN_SECONDS
                for event in watch.Watch().stream(
                    self.core.list_namespaced_pod, JOB_NAMESPACE, timeout_seconds=RESCAN_SECONDS
                ):
                    self.handle(event["object"])
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                # the API server restarting: the pods are all looked at again once it answers
                log.warning("API error, retrying in %ss: %s", RESCAN_SECONDS, error)
                time.sleep(RESCAN_SECONDS)  # noqa: TID251 a stand-in process's back-off, not a test's wait

    def handle(self, pod: client.V1Pod) -> None:
        meta, status = pod.metadata, pod.status
        annotations = meta.annotations or {}
        if meta.deletion_timestamp or ENDED in annotations or (status and status.phase) != "Running":
            return
        if pod.spec.node_name == REAL_NODE:  # its kubelet runs the storage initializer itself
            return
        disk = NodeDisk(self.nodes / pod.spec.node_name)
        control = disk.control()
        if control.held:
            return
        if control.failure:
            self.end(pod, "failed", control.failure)
            return
        try:
            folders = [self.write_model(pod, disk, container) for container in pod.spec.containers]
        except (LookupError, OSError) as error:
            self.end(pod, "failed", str(error))
            return
        log.info("%s/%s: wrote %s", pod.spec.node_name, meta.name, ", ".join(map(str, folders)))
        self.end(pod, "done", "")

    def write_model(self, pod: client.V1Pod, disk: NodeDisk, container: client.V1Container) -> Path:
        """The folder the container's volume mount points at on this node's disk, with the model in it.

        The storage initializer's arguments are the model's URI and where to put it; its mount is
        the node group's PersistentVolume (a local path on the node) and a sub path per model."""
        if len(container.args or []) < 2:
            raise LookupError(f"container {container.name} has no source URI and destination as its arguments")
        uri, target = container.args[0], container.args[1]
        mount = next((m for m in container.volume_mounts or [] if m.mount_path == target), None)
        volume = mount and next((v for v in pod.spec.volumes or [] if v.name == mount.name), None)
        if volume is None or volume.persistent_volume_claim is None:
            raise LookupError(f"container {container.name} has no PersistentVolumeClaim mounted at {target}")
        claim = self.core.read_namespaced_persistent_volume_claim(
            volume.persistent_volume_claim.claim_name, pod.metadata.namespace
        )
        if not claim.spec.volume_name:
            raise LookupError(f"PersistentVolumeClaim {claim.metadata.name} is not bound")
        volume_path = self.core.read_persistent_volume(claim.spec.volume_name).spec.local.path
        folder = disk.path_of(PurePosixPath(volume_path) / (mount.sub_path or ""))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"_name_or_path": uri}) + "\n")
        return folder

    def end(self, pod: client.V1Pod, how: str, message: str) -> None:
        patch = {"metadata": {"annotations": {ENDED: how, MESSAGE: message}}}
        try:
            self.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch)
        except ApiException as error:
            if error.status != 404:  # gone meanwhile: its Job was deleted
                raise
        if how == "failed":
            log.info("%s/%s: failed: %s", pod.spec.node_name, pod.metadata.name, message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testenv.addons.localmodel_downloads", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=Path, required=True, help="the folder of the node disks (one per node)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    config.load_kube_config(args.kubeconfig)
    Downloads(client.CoreV1Api(), args.nodes).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
