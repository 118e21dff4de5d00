"""A real S3-compatible server for the tests: versitygw, a gateway serving the S3 API over a POSIX directory, with
SigV4 signatures checked as AWS checks them (a wrong secret is refused, never ignored as a fake would).

The test bed builds it from its Go module (``testenv.builds``, component ``versitygw``); ``object_store`` runs
that binary as a process on a free port, its buckets under ``directory/data`` (a bucket is a folder, an object
a file) and its IAM accounts under ``directory/iam``, with root keys made for the run alone, handed over in
its environment (never on its command line). It yields once the server answers its health route, and stops it
after. ``ObjectStore.env`` is the environment KServe's storage initializer and the batch worker read.

Apart from the pytest fixture (``object_store_fixtures``), so that a script or the test bed's add-on
(``testenv.addons.object_store``) can start one too.
"""

from __future__ import annotations

import secrets
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

HEALTH = "/health"  # its health route (GET), answered 200 once it serves
REGION = "us-east-1"  # its default region, which SigV4 signs with


@dataclass(frozen=True)
class Keys:
    """An access key and its secret."""

    access: str
    secret: str

    @classmethod
    def made(cls) -> Keys:
        """Keys for one run: an access key id as AWS spells one, a 40-character secret."""
        return cls("AKIA" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30)[:40])


def command(binary: Path, address: str, port: int, directory: Path, tls: tuple[Path, Path] | None = None) -> list[str]:
    """versitygw on ``address:port``, its IAM service and its buckets under ``directory``; its root keys come from
    its environment (``server_env``). Plain HTTP, or HTTPS with ``tls`` (a certificate and its key)."""
    served = ["--cert", str(tls[0]), "--key", str(tls[1])] if tls else []
    return [
        str(binary),
        "--port",
        f"{address}:{port}",
        *served,
        "--iam-dir",
        str(directory / "iam"),
        "--health",
        HEALTH,
        "posix",
        str(directory / "data"),
    ]


def server_env(keys: Keys) -> dict[str, str]:
    """What versitygw reads its root user's keys from."""
    return {"ROOT_ACCESS_KEY": keys.access, "ROOT_SECRET_KEY": keys.secret}


def healthy(endpoint: str) -> bool:
    """Whether it answers its health route (over HTTPS without verifying: this is only whether it serves)."""
    unverified = ssl._create_unverified_context() if endpoint.startswith("https:") else None
    try:
        with urllib.request.urlopen(endpoint + HEALTH, timeout=2, context=unverified) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass(frozen=True)
class ObjectStore:
    """A running versitygw: where it listens, its root keys, and the folder its buckets are in."""

    endpoint: str
    keys: Keys
    data: Path
    region: str = REGION

    def env(self, **changed: str) -> dict[str, str]:
        """The environment a client of it reads (KServe's storage initializer's names), ``changed`` where given:
        ``env(AWS_SECRET_ACCESS_KEY="wrong")``."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.keys.access,
            "AWS_SECRET_ACCESS_KEY": self.keys.secret,
            "AWS_DEFAULT_REGION": self.region,
            **changed,
        }

    def client(self) -> Any:
        """A boto3 S3 client of the root user (path-style addressing), for a test's own reads and writes."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.keys.access,
            aws_secret_access_key=self.keys.secret,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}),
            verify=False if self.endpoint.startswith("https:") else None,
        )

    def bucket(self, name: str) -> str:
        """A new bucket ``name``; returns its name."""
        self.client().create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, body: bytes) -> str:
        """An object written; returns its ``s3://`` URI."""
        self.client().put_object(Bucket=bucket, Key=key, Body=body)
        return f"s3://{bucket}/{key}"

    def get(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()

    def keys_under(self, bucket: str, prefix: str = "") -> list[str]:
        """The keys of a bucket under ``prefix``, in order."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@contextmanager
def object_store(
    binary: Path, directory: Path, address: str = "127.0.0.1", tls: tuple[Path, Path] | None = None
) -> Iterator[ObjectStore]:
    """versitygw (``binary``) on ``address`` and a free port, its state under ``directory`` and its log in
    ``directory/versitygw.log``, over HTTPS with ``tls`` (a certificate for ``address`` and its key); yields once
    its health route answers, and stops it after."""
    for folder in ("data", "iam"):
        (directory / folder).mkdir(parents=True, exist_ok=True)
    keys, port = Keys.made(), free_port()
    endpoint = f"{'https' if tls else 'http'}://{address}:{port}"
    log = directory / "versitygw.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command(binary, address, port, directory, tls),
            env=server_env(keys),  # nothing else of this environment: no AWS_* of the host's
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def answers() -> bool:
            assert process.poll() is None, f"versitygw exited with {process.returncode}: {log.read_text()}"
            return healthy(endpoint)

        wait_until(f"versitygw's health route at {endpoint}", answers, timeout=30, interval=0.05)
        yield ObjectStore(endpoint, keys, directory / "data")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
