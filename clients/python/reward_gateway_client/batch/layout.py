"""A shard's output directory: its chunks (``part-NNNNN.jsonl``), its checkpoint and, once done, its manifest.

Each file is written whole under a temporary name and renamed into place (atomic on POSIX), and a chunk before
the checkpoint that counts it: a worker killed at any moment leaves either the old checkpoint (the chunk
written again on restart, over the same name) or the new one, never a half-written file that counts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CHECKPOINT = "_checkpoint.json"
MANIFEST = "_manifest.json"


def shard_directory(output: Path, shard: int, shards: int) -> Path:
    """Where a shard writes: the output itself for one shard, else ``shard-IIIII-of-NNNNN`` under it."""
    return output if shards == 1 else output / f"shard-{shard:05d}-of-{shards:05d}"


def part_path(directory: Path, chunk: int) -> Path:
    return directory / f"part-{chunk:05d}.jsonl"


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.partial")
    with temporary.open("w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def write_json(path: Path, value: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_part(directory: Path, chunk: int, rows: list[dict[str, Any]]) -> None:
    write_atomically(part_path(directory, chunk), "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def clear(directory: Path) -> None:
    """Drop a shard's chunks, checkpoint and manifest (to score again with another model)."""
    for path in directory.glob("part-*.jsonl"):
        path.unlink()
    for name in (CHECKPOINT, MANIFEST):
        (directory / name).unlink(missing_ok=True)
