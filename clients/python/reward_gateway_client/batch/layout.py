"""A shard's output directory: its chunks (``part-NNNNN.jsonl``), its checkpoint and, once done, its manifest.

Each file is written whole under a temporary name and renamed into place (atomic on POSIX), and a chunk before
the checkpoint that counts it: a worker killed at any moment leaves either the old checkpoint (the chunk
written again on restart, over the same name) or the new one, never a half-written file that counts. The
names are the same under an S3 prefix (``s3``), where a PUT of a whole object is the atomic write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CHECKPOINT = "_checkpoint.json"
MANIFEST = "_manifest.json"
PARTS = "part-*.jsonl"  # the chunks' names, as a glob


def shard_name(shard: int, shards: int) -> str | None:
    """A shard's folder under the output: none for one shard, else ``shard-IIIII-of-NNNNN``."""
    return None if shards == 1 else f"shard-{shard:05d}-of-{shards:05d}"


def shard_directory(output: Path, shard: int, shards: int) -> Path:
    """Where a shard writes: the output itself for one shard, else ``shard-IIIII-of-NNNNN`` under it."""
    name = shard_name(shard, shards)
    return output if name is None else output / name


def part_name(chunk: int) -> str:
    return f"part-{chunk:05d}.jsonl"


def part_path(directory: Path, chunk: int) -> Path:
    return directory / part_name(chunk)


def part_text(rows: list[dict[str, Any]]) -> str:
    """A chunk's content: one JSON object per line, keys sorted."""
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def json_text(value: dict[str, Any]) -> str:
    """A checkpoint's or a manifest's content."""
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.partial")
    with temporary.open("w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def write_json(path: Path, value: dict[str, Any]) -> None:
    write_atomically(path, json_text(value))


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_part(directory: Path, chunk: int, rows: list[dict[str, Any]]) -> None:
    write_atomically(part_path(directory, chunk), part_text(rows))


def clear(directory: Path) -> None:
    """Drop a shard's chunks, checkpoint and manifest (to score again with another model): the checkpoint and the
    manifest first, so a worker killed half-way leaves chunks that nothing counts, never a count of lost ones."""
    for name in (CHECKPOINT, MANIFEST):
        (directory / name).unlink(missing_ok=True)
    for path in directory.glob(PARTS):
        path.unlink()
