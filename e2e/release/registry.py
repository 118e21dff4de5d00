"""Where a release goes: the registry and path, its credentials and CA, as the programs that push want them."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Registry:
    """``location``: host[:port]/path, every image and the chart go under it; ``ca_file``: a CA to trust beside
    the system's (a private registry's), else None; credentials from REGISTRY_USERNAME/REGISTRY_PASSWORD."""

    location: str
    username: str | None = None
    password: str | None = None
    ca_file: Path | None = None

    @classmethod
    def from_env(cls, location: str, ca_file: str | None) -> Registry:
        username, password = os.environ.get("REGISTRY_USERNAME"), os.environ.get("REGISTRY_PASSWORD")
        if bool(username) != bool(password):
            raise SystemExit("release: set both REGISTRY_USERNAME and REGISTRY_PASSWORD, or neither")
        if ca_file and not Path(ca_file).is_file():
            raise SystemExit(f"release: no CA file at {ca_file}")
        return cls(location.rstrip("/"), username or None, password or None, Path(ca_file) if ca_file else None)

    @property
    def host(self) -> str:
        return self.location.split("/", 1)[0]

    def ref(self, repository: str) -> str:
        return f"{self.location}/{repository}"

    def docker_config(self, folder: Path) -> Path:
        """A DOCKER_CONFIG folder with the credentials (cosign and crane read it); the user's own when none."""
        folder.mkdir(parents=True, exist_ok=True)
        auths = {}
        if self.username:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            auths[self.host] = {"auth": token}
        (folder / "config.json").write_text(json.dumps({"auths": auths}))
        (folder / "config.json").chmod(0o600)
        return folder

    def cert_dir(self, folder: Path) -> Path | None:
        """A folder holding the CA as ``ca.crt`` (skopeo's and buildah's --cert-dir), or None."""
        if self.ca_file is None:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.ca_file, folder / "ca.crt")
        return folder

    def go_env(self, scratch: Path) -> dict[str, str]:
        """The environment of the Go programs (cosign, crane): the credentials, and the CA beside the system's."""
        env = {"DOCKER_CONFIG": str(self.docker_config(scratch / "docker"))} if self.username else {}
        if self.ca_file is not None:
            bundle = scratch / "ca-bundle.crt"
            system = Path("/etc/ssl/certs/ca-certificates.crt")
            bundle.write_text((system.read_text() if system.is_file() else "") + self.ca_file.read_text())
            env["SSL_CERT_FILE"] = str(bundle)
        return env


def scratch_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="reward-operator-release-"))
