"""kubectl of the pinned release against a kubeconfig, and the admin's kubeconfig of a local control plane."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from reward_testing import pki


def kubeconfig(server: str, keys: pki.Pki) -> dict:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testenv",
                "cluster": {"server": server, "certificate-authority-data": b64(keys.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "testenv-admin",
                "user": {
                    "client-certificate-data": b64(keys.admin_cert),
                    "client-key-data": b64(keys.admin_key),
                },
            }
        ],
        "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": "testenv-admin"}}],
        "current-context": "testenv",
    }


def run_kubectl(
    kubectl: Path, kubeconfig: str, args: tuple[str, ...], input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """kubectl against one kubeconfig; with ``check``, a failure raises with kubectl's own message."""
    result = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", *args], input=input, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result
