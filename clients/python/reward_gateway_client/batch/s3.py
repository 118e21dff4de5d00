"""The S3 side of ``store``: an input object and a shard's prefix, through boto3 (the ``s3`` extra).

boto3 is configured from the environment as KServe's storage initializer configures it, so that one Secret in
KServe's S3 convention serves a model's download and a batch alike:

- ``AWS_ENDPOINT_URL``: the endpoint (an S3-compatible server's URL); AWS's own where unset;
- ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``: the credentials (boto3's default chain, which also takes a
  profile, a web identity or an instance role); ``AWS_DEFAULT_REGION``: the region;
- ``S3_VERIFY_SSL``: ``0`` or ``false``, no TLS verification; ``AWS_CA_BUNDLE``: a CA bundle to verify with;
- ``S3_USER_VIRTUAL_BUCKET``: ``true`` (or ``1``), virtual-host addressing; path style otherwise, which every
  S3-compatible server takes;
- ``S3_CONNECT_TIMEOUT``, ``S3_READ_TIMEOUT``, ``S3_MAX_ATTEMPTS``: 15 s, 30 s and 3 tries (boto3's standard
  retries: 5xx, throttling, a connection lost), KServe's defaults.

An input is read in ranged GETs of ``BLOCK`` bytes, each read whole at once: the worker pauses between chunks
for as long as the gateway takes, and no connection is held open meanwhile. Every GET is pinned to the ETag
the first HEAD saw (If-Match), so a run never mixes two versions of an object replaced while it runs. A Parquet
input (``parquet``) is read at random through the same pinned ranged GETs (``S3Input.ranges``).

Nothing secret is ever in a message: the causes are said in a user's words with the server's error code, and
any credential found in a server's text is blanked.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator
from contextlib import closing, contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    SSLError,
)
from botocore.exceptions import ConnectionError as TransportError

from reward_gateway_client.batch import layout
from reward_gateway_client.batch.errors import BatchError

BLOCK = 8 << 20  # bytes of an input object fetched in one GET
S3_ERRORS = (BotoCoreError, ClientError)

# A server's error codes, in a user's words (an unknown code is shown with the server's own message)
CAUSES = {
    "SignatureDoesNotMatch": "the store refused the request's signature: AWS_SECRET_ACCESS_KEY is not the secret "
    "of AWS_ACCESS_KEY_ID",
    "InvalidAccessKeyId": "the store knows no such access key (AWS_ACCESS_KEY_ID)",
    "AccessDenied": "access denied: these credentials may not do this (AWS says so of a missing object too, to "
    "credentials without s3:ListBucket)",
    "NoSuchKey": "no such object",
    "NoSuchBucket": "no such bucket",
    "InvalidBucketName": "not a valid bucket name",
    "PreconditionFailed": "the object was replaced while this run read it (its ETag moved): the input changed",
    "412": "the object was replaced while this run read it (its ETag moved): the input changed",
}
# Codes that a later try may not meet (besides any 5xx): throttling, a server's own timeout
PASSING = {"SlowDown", "Throttling", "RequestTimeout", "ServiceUnavailable", "InternalError"}


def split(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` as (bucket, key); the key may be empty."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise BatchError(f"{uri} names no bucket: an S3 URI is s3://bucket/key", retry=False)
    return bucket, key


def _number(uri: str, name: str, default: float) -> float:
    text = os.environ.get(name) or str(default)
    try:
        value = float(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise BatchError(f"{uri}: {name}={text} is not a positive number", retry=False)
    return value


def client(uri: str) -> Any:
    """An S3 client configured from the environment (see the module's docstring)."""
    env = os.environ
    virtual = env.get("S3_USER_VIRTUAL_BUCKET", "").lower() in ("1", "true")
    config = Config(
        connect_timeout=_number(uri, "S3_CONNECT_TIMEOUT", 15),
        read_timeout=_number(uri, "S3_READ_TIMEOUT", 30),
        retries={"max_attempts": int(_number(uri, "S3_MAX_ATTEMPTS", 3)), "mode": "standard"},
        s3={"addressing_style": "virtual" if virtual else "path"},
    )
    options: dict[str, Any] = {"config": config}
    if env.get("AWS_ENDPOINT_URL"):
        options["endpoint_url"] = env["AWS_ENDPOINT_URL"]
    if env.get("S3_VERIFY_SSL", "").lower() in ("0", "false"):
        options["verify"] = False
    elif env.get("AWS_CA_BUNDLE"):
        if not Path(env["AWS_CA_BUNDLE"]).is_file():
            raise BatchError(f"{uri}: AWS_CA_BUNDLE names no file ({env['AWS_CA_BUNDLE']})", retry=False)
        options["verify"] = env["AWS_CA_BUNDLE"]
    try:
        return boto3.session.Session().client("s3", **options)
    except (BotoCoreError, ValueError) as error:  # a malformed endpoint URL or region
        raise BatchError(f"{uri}: cannot configure S3 from the environment: {error}", retry=False) from None


class _Store:
    """What the input and the output share: the client, the bucket, and the failures in a user's words."""

    def __init__(self, s3: Any, bucket: str):
        self.s3 = s3
        self.bucket = bucket

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def failure(self, error: Exception, doing: str) -> BatchError:
        """boto3's ``error`` as the shard's: ``doing`` (what failed, on which URI), the cause, and whether running
        again may help (the store unreachable, a 5xx, throttling) or not (credentials, a missing bucket)."""
        endpoint = self._endpoint()
        if isinstance(error, ClientError):
            code, status = _code(error), _status(error)
            cause = CAUSES.get(code) or error.response.get("Error", {}).get("Message") or "refused"
            answer = f"{status} {code}" if code and code != str(status) else str(status)
            retry = status >= 500 or status in (408, 429) or code in PASSING
            return BatchError(self._blank(f"{doing}: {cause} ({endpoint} answered {answer})"), retry)
        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            cause = f"no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY ({error})"
            return BatchError(f"{doing}: {cause}", retry=False)
        if isinstance(error, SSLError):
            cause = f"TLS with {endpoint} failed (S3_VERIFY_SSL, AWS_CA_BUNDLE): {error}"
            return BatchError(self._blank(f"{doing}: {cause}"), retry=False)
        if isinstance(error, TransportError | HTTPClientError):
            return BatchError(self._blank(f"{doing}: {endpoint} did not answer: {error}"), retry=True)
        return BatchError(self._blank(f"{doing}: {error}"), retry=False)

    def _endpoint(self) -> str:
        """The endpoint's URL, without any user information written into it."""
        parts = urlsplit(self.s3.meta.endpoint_url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))

    @staticmethod
    def _blank(text: str) -> str:
        """``text`` with the secrets of the environment blanked (a server may echo what it was sent)."""
        for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            if secret := os.environ.get(name):
                text = text.replace(secret, "***")
        return text


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code") or "")


def _status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


class S3Input(_Store):
    """An input object, ``s3://bucket/key``."""

    def __init__(self, s3: Any, bucket: str, key: str):
        super().__init__(s3, bucket)
        self.key = key
        self._seen: tuple[str, int] | None = None  # its ETag and size, from the first HEAD

    @classmethod
    def of(cls, uri: str) -> S3Input:
        bucket, key = split(uri)
        if not key or key.endswith("/"):
            raise BatchError(f"the input {uri} names no object: write s3://bucket/key", retry=False)
        return cls(client(uri), bucket, key)

    @property
    def name(self) -> str:
        return self.uri(self.key)

    def lines(self) -> Iterator[str]:
        with _Reading(self) as data:
            yield from io.TextIOWrapper(data, encoding="utf-8")

    def digest(self) -> str:
        digest = hashlib.sha256()
        with _Reading(self) as data:
            while block := data.read(BLOCK):
                digest.update(block)
        return digest.hexdigest()

    def seen(self) -> tuple[str, int]:
        """The object's ETag and size, from its first HEAD: what every read of this run is pinned to."""
        if self._seen is None:
            try:
                head = self.s3.head_object(Bucket=self.bucket, Key=self.key)
            except ClientError as error:
                if _code(error).isdigit():  # a HEAD's answer has no body: a GET's error names the cause
                    with closing(self.s3.get_object(Bucket=self.bucket, Key=self.key, Range="bytes=0-0")["Body"]):
                        pass
                raise
            self._seen = (head["ETag"], int(head["ContentLength"]))
        return self._seen

    def block(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (inclusive) of the object seen first."""
        etag, _ = self.seen()
        answer = self.s3.get_object(Bucket=self.bucket, Key=self.key, IfMatch=etag, Range=f"bytes={start}-{end}")
        with closing(answer["Body"]) as body:
            return body.read()

    @contextmanager
    def ranges(self) -> Iterator[_Blocks]:
        """The object read at random, a ranged GET a read, each pinned to the first ETag (``parquet``)."""
        yield _Blocks(self)


class _Blocks:
    """An input object's size and any range of it, boto3's failures as ``BatchError``."""

    def __init__(self, source: S3Input):
        self.source = source
        try:
            self.size = source.seen()[1]
        except S3_ERRORS as error:
            raise source.failure(error, f"cannot read the input {source.name}") from None

    def read(self, start: int, end: int) -> bytes:
        try:
            return self.source.block(start, end)
        except S3_ERRORS as error:
            raise self.source.failure(error, f"cannot read the input {self.source.name}") from None


class _Reading:
    """One pass over an input object as a buffered binary file; boto3's failures leave it as ``BatchError``."""

    def __init__(self, source: S3Input):
        self.source = source

    def __enter__(self) -> io.BufferedReader:
        try:
            self.file = io.BufferedReader(_Ranges(self.source, self.source.seen()[1]), buffer_size=1 << 16)
        except S3_ERRORS as error:
            raise self.source.failure(error, f"cannot read the input {self.source.name}") from None
        return self.file

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        self.file.close()
        doing = f"cannot read the input {self.source.name}"
        if isinstance(error, S3_ERRORS):
            raise self.source.failure(error, doing) from None
        if isinstance(error, UnicodeDecodeError):
            raise BatchError(f"{doing}: it is not UTF-8 text: {error}", retry=False) from None


class _Ranges(io.RawIOBase):
    """An object as a raw file: one ranged GET per ``BLOCK``, each read whole when asked for."""

    def __init__(self, source: S3Input, size: int):
        self.source, self.size = source, size
        self.fetched = 0  # bytes of the object fetched so far
        self.held, self.offset = b"", 0  # the block fetched last, and how much of it was read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.offset == len(self.held):
            if self.fetched >= self.size:
                return 0
            self.held = self.source.block(self.fetched, min(self.fetched + BLOCK, self.size) - 1)
            if not self.held:  # shorter than its HEAD said: replaced under the same ETag's watch
                raise BatchError(f"cannot read the input {self.source.name}: it ended early", retry=True)
            self.fetched += len(self.held)
            self.offset = 0
        count = min(len(buffer), len(self.held) - self.offset)
        buffer[:count] = self.held[self.offset : self.offset + count]
        self.offset += count
        return count


class S3Output(_Store):
    """A shard's output under a prefix, ``s3://bucket/prefix`` (the bucket's top where there is none)."""

    def __init__(self, s3: Any, bucket: str, prefix: str):
        super().__init__(s3, bucket)
        self.prefix = prefix

    @classmethod
    def of(cls, uri: str, shard: str | None) -> S3Output:
        bucket, prefix = split(uri)
        prefix = "/".join(part for part in (prefix.rstrip("/"), shard) if part)
        return cls(client(uri), bucket, prefix)

    @property
    def name(self) -> str:
        return self.uri(self.prefix)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def write_part(self, chunk: int, rows: list[dict[str, Any]]) -> None:
        self._put(layout.part_name(chunk), layout.part_text(rows), "application/x-ndjson")

    def write_json(self, name: str, value: dict[str, Any]) -> None:
        self._put(name, layout.json_text(value), "application/json")

    def read_json(self, name: str) -> dict[str, Any] | None:
        key = self.key(name)
        try:
            answer = self.s3.get_object(Bucket=self.bucket, Key=key)
            with closing(answer["Body"]) as body:
                text = body.read()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "NoSuchKey":
                return None
            raise self.failure(error, f"cannot read {self.uri(key)}") from None
        except BotoCoreError as error:
            raise self.failure(error, f"cannot read {self.uri(key)}") from None
        return json.loads(text)

    def clear(self) -> None:
        """The checkpoint and the manifest first (as ``layout.clear``), then the chunks."""
        keys = [self.key(layout.CHECKPOINT), self.key(layout.MANIFEST)]
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.key("part-")):
                for listed in page.get("Contents", []):
                    name = listed["Key"].removeprefix(self.key(""))
                    if "/" not in name and fnmatchcase(name, layout.PARTS):
                        keys.append(listed["Key"])
            for key in keys:
                self.s3.delete_object(Bucket=self.bucket, Key=key)
        except S3_ERRORS as error:
            raise self.failure(error, f"cannot clear the output {self.name}") from None

    def _put(self, name: str, text: str, content_type: str) -> None:
        key = self.key(name)
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=text.encode("utf-8"), ContentType=content_type)
        except S3_ERRORS as error:
            raise self.failure(error, f"cannot write {self.uri(key)}") from None
