"""Fresh certificates for one control-plane run, made with the openssl CLI.

EC P-256 keys keep start-up fast. The CA carries a critical basicConstraints and
key identifiers because Python 3.13+ (and strict Go verifiers) refuse CA
certificates without them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# Addresses the API server answers on, in-cluster names included, so that
# clients inside (kwok pods, helm test hooks) and outside both verify it.
SERVING_SANS = (
    "IP:127.0.0.1",
    "IP:10.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _new_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def issue(directory: Path, name: str, subject: str, extensions: list[str], pki_ca: tuple[Path, Path]) -> None:
    """``<name>.crt`` and ``<name>.key`` in ``directory``, signed by the CA ``pki_ca`` (cert, key)."""
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.crt"
    ext_file = directory / f"{name}.ext"
    _new_key(key)
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    ext_file.write_text("\n".join(extensions) + "\n")
    ca_cert, ca_key = pki_ca
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "365",
        "-sha256",
        "-extfile",
        str(ext_file),
        "-out",
        str(cert),
    )
    csr.unlink()
    ext_file.unlink()


def create(directory: Path, extra_addresses: tuple[str, ...] = ()) -> Pki:
    """A CA, the API server's serving certificate (SERVING_SANS plus ``extra_addresses``), an admin
    client certificate and the service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    _new_key(ca_key)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(ca_key),
        "-subj",
        "/CN=reward-operator-testenv-ca",
        "-days",
        "365",
        "-sha256",
        "-out",
        str(ca_cert),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-addext",
        "subjectKeyIdentifier=hash",
    )
    leaf = [
        "basicConstraints=critical,CA:FALSE",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid",
    ]
    issue(
        directory,
        "apiserver",
        "/CN=kube-apiserver",
        [
            *leaf,
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth",
            "subjectAltName=" + ",".join([*SERVING_SANS, *(f"IP:{address}" for address in extra_addresses)]),
        ],
        (ca_cert, ca_key),
    )
    issue(
        directory,
        "admin",
        "/O=system:masters/CN=testenv-admin",
        [*leaf, "keyUsage=critical,digitalSignature,keyEncipherment", "extendedKeyUsage=clientAuth"],
        (ca_cert, ca_key),
    )
    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    _new_key(sa_key)
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    return Pki(
        ca_cert=ca_cert,
        ca_key=ca_key,
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=sa_key,
        service_account_pub=sa_pub,
    )
