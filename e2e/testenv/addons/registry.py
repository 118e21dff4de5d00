"""An OCI registry for the control plane: Debian's ``docker-registry`` (distribution 2.8) as a host process, an
add-on.

Opt-in (``TESTENV_REGISTRY=1``, ``python -m testenv up --registry``): where a test needs our images the way a
cluster gets them, pulled from a registry by tag and digest with a pull secret (``make release-real``). It serves
over TLS with a certificate the control plane's CA signs (for the host's own address, where the real node's
containerd and its pods reach it, and for loopback), and with basic auth (htpasswd, bcrypt), so that a pull
without the Secret is refused as a private registry refuses it. The real node's containerd trusts the CA through
its registry hosts folder (``hosts.toml``, ``node.configs.registry_hosts_dir``).

With it on, the real node imports none of the images in ``pulls_images`` (our operator's and vLLM's CPU runtime):
the node pulls what a release pushed, and a node that had our images already would prove nothing.

What a test or the release tool reads, in the control plane's folder under ``registry/``: ``ca.crt``, and
``docker/config.json`` (the credentials in the format cosign, crane and helm read through ``DOCKER_CONFIG``); and
in the cluster, the Secret ``testenv-registry`` (``kubernetes.io/dockerconfigjson``) in the namespace ``default``
with the registry's address in its annotation ``testenv.rlhf.dev/registry``. ``access`` reads them back.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import ssl
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml

from reward_testing import pki
from reward_testing.ports import free_port

from ..node.configs import registry_hosts_dir
from ..node.facts import host_address
from ..plane.addon import AddOn, Plane, log, wait_by

PROCESS = "registry"  # the recorded process's name, and its port's
BINARY = "docker-registry"  # Debian's package of the same name (distribution 2.8.2)
NAMESPACE = "default"
SECRET = "testenv-registry"
ADDRESS_ANNOTATION = "testenv.rlhf.dev/registry"
USER = "testenv"


@dataclass(frozen=True)
class Access:
    """How to reach the running registry: its address (``host:port``), its CA, the credentials, and a
    ``DOCKER_CONFIG`` folder holding them."""

    address: str
    ca_file: Path
    username: str
    password: str
    docker_config: Path

    def env(self) -> dict[str, str]:
        """What cosign, crane and helm (Go programs) need beside the registry: the credentials and the CA."""
        return {"DOCKER_CONFIG": str(self.docker_config), "SSL_CERT_FILE": str(self.ca_file)}


def folder(directory: Path) -> Path:
    return directory / "registry"


def access(cluster, directory: Path) -> Access:
    """The running registry as the Secret ``testenv-registry`` and the control plane's folder ``directory`` say."""
    found = json.loads(cluster.kubectl("get", "secret", SECRET, "-n", NAMESPACE, "-o", "json").stdout)
    address = found["metadata"]["annotations"][ADDRESS_ANNOTATION]
    config = json.loads(base64.b64decode(found["data"][".dockerconfigjson"]))
    username, password = base64.b64decode(config["auths"][address]["auth"]).decode().split(":", 1)
    return Access(address, folder(directory) / "ca.crt", username, password, folder(directory) / "docker")


def docker_config(address: str, username: str, password: str) -> dict:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {address: {"username": username, "password": password, "auth": token}}}


def pull_secret(address: str, username: str, password: str, namespace: str = NAMESPACE, name: str = SECRET) -> dict:
    """The registry's pull secret; ``name`` and ``namespace`` for a test's own copy."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "annotations": {ADDRESS_ANNOTATION: address}},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json.dumps(docker_config(address, username, password))},
    }


def htpasswd_line(username: str, password: str) -> str:
    # distribution's htpasswd accepts bcrypt only; glibc's crypt() makes it ($2b$), and the test bed runs on
    # Python 3.11, where the crypt module is deprecated but present
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        return f"{username}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))}\n"


def config(directory: Path, listen: str) -> dict:
    """distribution's configuration: a folder store with deletes, TLS, htpasswd."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(directory / "data")}, "delete": {"enabled": True}},
        "http": {
            "addr": listen,
            "tls": {"certificate": str(directory / "registry.crt"), "key": str(directory / "registry.key")},
            # distribution refuses to start without a secret when it is not given one (several replicas share it)
            "secret": secrets.token_hex(16),
        },
        "auth": {"htpasswd": {"realm": "testenv-registry", "path": str(directory / "htpasswd")}},
    }


def hosts_toml(address: str, ca_file: Path) -> str:
    """containerd's hosts file for the registry: pulls over TLS with the control plane's CA."""
    return (
        f'server = "https://{address}"\n\n'
        f'[host."https://{address}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
        f'  ca = "{ca_file}"\n'
    )


class RegistryAddOn(AddOn):
    """The add-on: distribution started on the host's address with TLS and basic auth, the pull secret applied,
    containerd's hosts file written; ready once ``/v2/`` answers an authenticated request."""

    name = "registry"
    title = "distribution 2.8 (Debian's docker-registry), an OCI registry with TLS and basic auth"
    probe = (f"secret/{SECRET}", "no test-bed registry (TESTENV_REGISTRY=1)")
    processes = (PROCESS,)
    pulls_images = ("operator", "vllm-cpu")

    def start(self, plane: Plane, deadline: float) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise RuntimeError(
                f"{BINARY} is not installed: it is Debian's package docker-registry (make release-real installs it)"
            )
        log(f"starting {self.title}")
        port = plane.state.ports[PROCESS] = free_port()
        address = f"{host_address()}:{port}"
        directory = folder(plane.directory)
        (directory / "data").mkdir(parents=True, exist_ok=True)
        shutil.copy(plane.keys.ca_cert, directory / "ca.crt")
        pki.issue(
            directory,
            "registry",
            "/CN=testenv-registry",
            [
                "basicConstraints=critical,CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                "extendedKeyUsage=serverAuth",
                f"subjectAltName=IP:{host_address()},IP:127.0.0.1",
            ],
            (plane.keys.ca_cert, plane.keys.ca_key),
        )
        password = secrets.token_urlsafe(18)
        (directory / "htpasswd").write_text(htpasswd_line(USER, password))
        (directory / "docker").mkdir(exist_ok=True)
        (directory / "docker" / "config.json").write_text(json.dumps(docker_config(address, USER, password)))
        (directory / "config.yml").write_text(yaml.safe_dump(config(directory, f"0.0.0.0:{port}")))
        hosts = registry_hosts_dir(plane.directory / "node") / address
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(hosts_toml(address, directory / "ca.crt"))
        plane.spawn(PROCESS, [binary, "serve", str(directory / "config.yml")])
        # created, not applied: kubectl apply would copy the password into its last-applied annotation
        plane.kubectl("create", "-f", "-", input=json.dumps(pull_secret(address, USER, password)))

    def wait(self, plane: Plane, deadline: float) -> None:
        directory = folder(plane.directory)
        port = plane.state.ports[PROCESS]
        context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
        context.check_hostname = False  # the certificate names the host's address; loopback is asked here
        config = json.loads((directory / "docker" / "config.json").read_text())
        token = next(iter(config["auths"].values()))["auth"]

        def answers() -> bool:
            plane.fail_if_exited(PROCESS)
            request = urllib.request.Request(
                f"https://127.0.0.1:{port}/v2/", headers={"Authorization": f"Basic {token}"}
            )
            try:
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    return response.status == 200
            except (urllib.error.URLError, OSError):
                return False

        wait_by(deadline, "the registry answering /v2/ with its credentials", answers)
