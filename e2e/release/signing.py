"""Signatures and SBOMs: each image described by syft (SPDX JSON) and the description attested, each image and
the chart signed by cosign, by digest. With a key pair (``--cosign-key``; no transparency log: cosign's
air-gapped mode, where the log is unreachable) or keyless (CI's OIDC identity, Fulcio and Rekor)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .tools import run


@dataclass(frozen=True)
class Signer:
    """``key``: a cosign private key (its password in COSIGN_PASSWORD), or None for keyless."""

    key: Path | None
    env: dict[str, str]  # the registry's credentials and CA (Registry.go_env)

    def _offline(self) -> list[str]:
        # a key pair and no transparency log; --use-signing-config=false keeps cosign from fetching the public
        # instance's signing configuration (TUF), which a private network cannot reach
        return ["--key", str(self.key), "--tlog-upload=false", "--use-signing-config=false"] if self.key else []

    def sign(self, by_digest: str) -> None:
        run(f"sign {by_digest}", "cosign", "sign", "--yes", *self._offline(), by_digest, env=self.env)

    def attest_sbom(self, by_digest: str, sbom: Path) -> None:
        run(
            f"attest the SBOM of {by_digest}",
            "cosign",
            "attest",
            "--yes",
            *self._offline(),
            "--type",
            "spdxjson",
            "--predicate",
            str(sbom),
            by_digest,
            env=self.env,
        )


def sbom(tar: Path, name: str, out: Path) -> Path:
    """An SPDX JSON SBOM of the image in ``tar`` (syft reads the archive itself, no registry round trip)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.spdx.json"
    run(f"SBOM of {name}", "syft", "scan", f"docker-archive:{tar}", "-o", f"spdx-json={path}", "--quiet")
    return path


def verify(by_digest: str, public_key: Path | None, env: dict[str, str], identity: dict[str, str] | None = None) -> str:
    """``cosign verify`` of ``by_digest`` with the public key (no log: what the key pair's signing wrote) or a
    keyless identity (``certificate-identity-regexp``, ``certificate-oidc-issuer``); cosign's own report."""
    args = ["--key", str(public_key), "--insecure-ignore-tlog"] if public_key else []
    for flag, value in (identity or {}).items():
        args += [f"--{flag}", value]
    return run(f"verify {by_digest}", "cosign", "verify", *args, by_digest, env=env)
