"""A Parquet input (``--input-format parquet``), read with pyarrow (the ``parquet`` extra), row group by row group.

Each row becomes the JSON object a JSONL line would be, so ``rows`` reads it as it reads a line: the columns by
name, a list as a list, a struct as an object (a ``messages`` column of ``list<struct<role, content>>`` is a
conversation), a map as an object; a null is a field that is absent, as where a Parquet file was written from
JSON rows that did not all have every field. A timestamp or a date is its ISO 8601 text, a decimal its text,
bytes their UTF-8 text (base64 where they are not UTF-8). The rows' positions, ids and groups are those of the
same rows in a JSONL file.

A local file is read by pyarrow itself; an S3 object or an https:// file at random, through a small read-only
file over ranged GETs (``S3Input.ranges``, ``HttpInput.ranges``), pinned as every read of the run is: the
footer first, then each row group's column chunks. The input's sha256 is the file's, read through once.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pyarrow
import pyarrow.parquet

from reward_gateway_client.batch import store
from reward_gateway_client.batch.errors import BatchError

BATCH_ROWS = 1024  # rows of a row group turned into Python objects at once


class ParquetInput:
    """A Parquet file (``source``: a local file, an S3 object or an https:// file), as JSON lines."""

    def __init__(self, source: Any):
        self.source = source

    @property
    def name(self) -> str:
        return self.source.name

    def digest(self) -> str:
        return self.source.digest()

    def lines(self) -> Iterator[str]:
        doing = f"cannot read the input {self.name}"
        with ExitStack() as stack:
            try:
                parquet = stack.enter_context(self._open(stack))
                for group in range(parquet.num_row_groups):
                    table = parquet.read_row_group(group)
                    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                        for record in batch.to_pylist(maps_as_pydicts="lossy"):
                            yield json.dumps(_plain(record), ensure_ascii=False) + "\n"
            except pyarrow.ArrowException as error:
                raise BatchError(f"{doing}: not a Parquet file pyarrow can read: {error}", retry=False) from None
            except OSError as error:
                raise BatchError(f"{doing}: {error}", retry=False) from None

    def _open(self, stack: ExitStack) -> pyarrow.parquet.ParquetFile:
        if isinstance(self.source, store.LocalInput):
            return pyarrow.parquet.ParquetFile(str(self.source.path))
        ranges = stack.enter_context(self.source.ranges())
        return pyarrow.parquet.ParquetFile(pyarrow.PythonFile(_RangedFile(ranges), mode="r"))


def _plain(value: Any) -> Any:
    """A value of a row as JSON holds it: nulls in an object dropped (an absent field), the rest as text."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items() if item is not None}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


class _RangedFile(io.RawIOBase):
    """A read-only, seekable file over ``ranges`` (its ``size``, and ``read(start, end)``: one ranged GET each),
    for pyarrow, which reads the footer first and then the column chunks it needs."""

    def __init__(self, ranges: Any):
        self.ranges = ranges
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.ranges.size}[whence]
        if start + offset < 0:
            raise OSError(f"cannot seek to {start + offset}")
        self.position = start + offset
        return self.position

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.ranges.size - self.position)
        if count <= 0:
            return 0
        buffer[:count] = self.ranges.read(self.position, self.position + count - 1)
        self.position += count
        return count

    def readall(self) -> bytes:
        if self.position >= self.ranges.size:
            return b""
        data = self.ranges.read(self.position, self.ranges.size - 1)
        self.position = self.ranges.size
        return data
