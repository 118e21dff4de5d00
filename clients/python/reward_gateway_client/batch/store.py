"""Where a shard reads its input and writes its output: a local file and directory, or S3 (``s3://``); an input
may also be an ``https://`` (or ``http://``) file, and a Parquet file wherever it is.

The worker sees two small interfaces, whatever the scheme: an ``Input`` (its lines, streamed, and its
sha256) and a shard's ``Output`` (a chunk written whole, the checkpoint and the manifest written and read, all
of it cleared). Both keep ``layout``'s commit rule, a chunk written whole before the checkpoint that counts
it: a local file is written under a temporary name and renamed, an S3 object by one PUT (atomic: a reader
sees the old object or the new one, never half of one). ``s3`` holds the S3 side, imported only where an
``s3://`` URI is given, so boto3 is needed only there (the ``s3`` extra); ``web`` the https:// side (httpx, the
package's own dependency); ``parquet`` a Parquet input's rows as JSON lines, imported only for
``--input-format parquet``, so pyarrow is needed only there (the ``parquet`` extra).

A failure leaves as ``BatchError``, naming the path or URI and the cause, with whether running again may help.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reward_gateway_client.batch import layout
from reward_gateway_client.batch.errors import BatchError

S3_SCHEME = "s3://"
S3_EXTRA = "pip install 'reward-gateway-client[s3]'"
HTTP_SCHEMES = ("https://", "http://")
FORMATS = ("jsonl", "parquet")  # --input-format
PARQUET_EXTRA = "pip install 'reward-gateway-client[parquet]'"


class Input(Protocol):
    """An input as JSON lines (a JSONL file's, or a Parquet file's rows): read as a stream of lines, never whole,
    as often as the worker needs."""

    @property
    def name(self) -> str:
        """The path or URI, as the manifest and the messages say it."""
        ...

    def lines(self) -> Iterator[str]:
        """The input's lines in order (universal newlines, as a text file reads), from the first."""
        ...

    def digest(self) -> str:
        """The input's sha256, read through once."""
        ...


class Output(Protocol):
    """A shard's output: its folder, or its prefix under an S3 output."""

    @property
    def name(self) -> str: ...

    def write_part(self, chunk: int, rows: list[dict[str, Any]]) -> None:
        """Chunk ``chunk``'s rows, written whole under its name (over an older one)."""
        ...

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The checkpoint or the manifest (``layout.CHECKPOINT``, ``layout.MANIFEST``); None where absent."""
        ...

    def write_json(self, name: str, value: dict[str, Any]) -> None: ...

    def clear(self) -> None:
        """Drop the shard's chunks, checkpoint and manifest (to score again with another model)."""
        ...


def is_s3(location: str | os.PathLike[str]) -> bool:
    return os.fspath(location).startswith(S3_SCHEME)


def is_http(location: str | os.PathLike[str]) -> bool:
    return os.fspath(location).lower().startswith(HTTP_SCHEMES)


def is_uri(location: str | os.PathLike[str]) -> bool:
    """An S3 or https:// URI, which a ``Path`` would fold (its ``//``), rather than a local path."""
    return is_s3(location) or is_http(location)


def open_input(location: str | os.PathLike[str], input_format: str = "jsonl") -> Input:
    """The input a path, an ``s3://bucket/key`` or an ``https://`` URI names, as JSON lines: the file's own
    (``jsonl``) or a Parquet file's rows (``parquet``). Nothing is read yet."""
    if input_format not in FORMATS:
        raise BatchError(f"--input-format {input_format}: not one of {', '.join(FORMATS)}", retry=False)
    uri = os.fspath(location)
    source: Input
    if is_s3(uri):
        source = _s3_module(uri).S3Input.of(uri)
    elif is_http(uri):
        from reward_gateway_client.batch import web

        source = web.HttpInput.of(uri)
    else:
        source = LocalInput(Path(location))
    if input_format == "parquet":
        return _parquet_module(source.name).ParquetInput(source)
    return source


def open_output(location: str | os.PathLike[str], shard: int, shards: int) -> Output:
    """Shard ``shard``'s output under a directory or an ``s3://bucket/prefix`` URI (``layout.shard_name``)."""
    if is_http(location):
        from reward_gateway_client.batch import web

        raise BatchError(
            f"the output {web.public_name(os.fspath(location))}: https:// and http:// are for the input only; "
            "write the output to a directory or an s3://bucket/prefix",
            retry=False,
        )
    if is_s3(location):
        return _s3_module(os.fspath(location)).S3Output.of(os.fspath(location), layout.shard_name(shard, shards))
    return LocalOutput(layout.shard_directory(Path(location), shard, shards))


def _s3_module(uri: str) -> Any:
    try:
        from reward_gateway_client.batch import s3
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in ("boto3", "botocore"):
            raise
        raise BatchError(f"{uri}: s3:// needs boto3, which is not installed: {S3_EXTRA}", retry=False) from None
    return s3


def _parquet_module(name: str) -> Any:
    try:
        from reward_gateway_client.batch import parquet
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "pyarrow":
            raise
        raise BatchError(
            f"{name}: --input-format parquet needs pyarrow, which is not installed: {PARQUET_EXTRA}", retry=False
        ) from None
    return parquet


@dataclass(frozen=True)
class LocalInput:
    path: Path

    @property
    def name(self) -> str:
        return str(self.path)

    def lines(self) -> Iterator[str]:
        try:
            with self.path.open(encoding="utf-8") as text:
                yield from text
        except (OSError, UnicodeDecodeError) as error:
            raise BatchError(f"cannot read the input {self.path}: {error}", retry=False) from None

    def digest(self) -> str:
        digest = hashlib.sha256()
        try:
            with self.path.open("rb") as data:
                while block := data.read(1 << 20):
                    digest.update(block)
        except OSError as error:
            raise BatchError(f"cannot read the input {self.path}: {error}", retry=False) from None
        return digest.hexdigest()


@dataclass(frozen=True)
class LocalOutput:
    directory: Path

    @property
    def name(self) -> str:
        return str(self.directory)

    def write_part(self, chunk: int, rows: list[dict[str, Any]]) -> None:
        try:
            layout.write_part(self.directory, chunk, rows)
        except OSError as error:
            raise BatchError(f"cannot write the output {self.directory}: {error}", retry=False) from None

    def read_json(self, name: str) -> dict[str, Any] | None:
        try:
            return layout.read_json(self.directory / name)
        except OSError as error:
            raise BatchError(f"cannot read {self.directory / name}: {error}", retry=False) from None

    def write_json(self, name: str, value: dict[str, Any]) -> None:
        try:
            layout.write_json(self.directory / name, value)
        except OSError as error:
            raise BatchError(f"cannot write the output {self.directory}: {error}", retry=False) from None

    def clear(self) -> None:
        try:
            layout.clear(self.directory)
        except OSError as error:
            raise BatchError(f"cannot clear the output {self.directory}: {error}", retry=False) from None
