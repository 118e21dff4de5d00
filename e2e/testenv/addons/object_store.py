"""An S3-compatible object store for the control plane: versitygw as a host process, an add-on.

Opt-in (``TESTENV_OBJECT_STORE=1``, ``python -m testenv up --object-store``): where a test needs data where users
keep it, a batch's input and output, or a model served from ``s3://``. versitygw (builds/go/versitygw; a real
S3 gateway over a folder, SigV4 enforced) runs as a recorded process of the test bed with root keys made for
this control plane, its buckets folders under ``object-store/data`` in the plane's folder. It listens on
loopback and on the host's own address (``node.facts.host_address``), where the real node's pods reach it as
they reach the models' storage server; plain HTTP, as that server.

It makes the Secret ``testenv-object-store`` in the namespace ``default`` in KServe's S3 convention: the keys
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (the names KServe 0.20's inferenceservice-config gives them:
its credential builder passes a ServiceAccount's Secret to the storage initializer only under those), and the
annotations ``serving.kserve.io/s3-endpoint`` (host and
port), ``serving.kserve.io/s3-usehttps: "0"`` and ``serving.kserve.io/s3-region``, from which KServe's
controller sets ``AWS_ENDPOINT_URL`` and the keys for its storage initializer. A test copies it into its own
namespace (``secret``) and names it from a ServiceAccount, as a user does; ``store`` reads it back for the
test's own reads and writes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from reward_testing import versions
from reward_testing.object_store import HEALTH, REGION, Keys, ObjectStore, command, server_env
from reward_testing.ports import free_port

from ..node.facts import host_address
from ..plane.addon import AddOn, Plane, log

PROCESS = "object-store"  # the recorded process's name, and its port's
BINARY = "versitygw"
NAMESPACE = "default"
SECRET = "testenv-object-store"
KSERVE = "serving.kserve.io"


def secret(keys: Keys, endpoint: str, namespace: str = NAMESPACE, name: str = SECRET) -> dict:
    """The Secret of the store's keys in KServe's S3 convention; ``endpoint``: its host and port."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {
                f"{KSERVE}/s3-endpoint": endpoint,
                f"{KSERVE}/s3-usehttps": "0",
                f"{KSERVE}/s3-region": REGION,
            },
        },
        "type": "Opaque",
        "stringData": {"AWS_ACCESS_KEY_ID": keys.access, "AWS_SECRET_ACCESS_KEY": keys.secret},
    }


def store(cluster, directory: Path | None = None) -> tuple[ObjectStore, dict]:
    """The running store as the Secret ``testenv-object-store`` names it, and that Secret (to copy into a test's
    namespace: ``secret(keys, endpoint, namespace)``); ``directory``: the control plane's folder, where known."""
    found = json.loads(cluster.kubectl("get", "secret", SECRET, "-n", NAMESPACE, "-o", "json").stdout)
    data = {key: base64.b64decode(value).decode() for key, value in found["data"].items()}
    endpoint = found["metadata"]["annotations"][f"{KSERVE}/s3-endpoint"]
    keys = Keys(data["AWS_ACCESS_KEY_ID"], data["AWS_SECRET_ACCESS_KEY"])
    buckets = directory / "object-store" / "data" if directory else Path("/nonexistent")
    return ObjectStore(f"http://{endpoint}", keys, buckets), found


class ObjectStoreAddOn(AddOn):
    """The add-on: versitygw started with its root keys in its environment, the Secret applied; ready once its
    health route answers on loopback."""

    name = "object-store"
    title = f"versitygw v{versions.VERSITYGW}, an S3-compatible object store"
    probe = (f"secret/{SECRET}", "no test-bed object store (TESTENV_OBJECT_STORE=1)")
    processes = (PROCESS,)
    build_components = ("versitygw",)

    def start(self, plane: Plane, deadline: float) -> None:
        log(f"starting {self.title}")
        port = plane.state.ports[PROCESS] = free_port()
        directory = plane.directory / "object-store"
        for folder in ("data", "iam"):
            (directory / folder).mkdir(parents=True, exist_ok=True)
        keys, address = Keys.made(), host_address()
        args = command(plane.bin / BINARY, "127.0.0.1", port, directory)
        # a second listener beside loopback's (--port repeats): the host's address, which pods reach
        args[1:1] = ["--port", f"{address}:{port}"]
        plane.spawn(PROCESS, args, env=server_env(keys))
        # created, not applied: kubectl apply would copy the keys into its last-applied annotation
        plane.kubectl("create", "-f", "-", input=json.dumps(secret(keys, f"{address}:{port}")))

    @staticmethod
    def health_checks(ports: dict[str, int]) -> dict[str, tuple[str, bool]]:
        return {PROCESS: (f"http://127.0.0.1:{ports.get(PROCESS)}{HEALTH}", False)}
