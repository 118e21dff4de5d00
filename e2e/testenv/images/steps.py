"""How the images' long steps run: a progress line every 30 s, the output into the image's log, its tail on a
failure; and one build of an image at a time on the machine."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..artifacts import cache_root, heartbeat, one_at_a_time


def images_dir() -> Path:
    return cache_root() / "testenv" / "images"


def note(message: str) -> None:
    print(f"[testenv images] {message}", file=sys.stderr, flush=True)


def run_step(label: str, command: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run a step, its output into ``log``; a progress line every 30 s, the log's tail on failure."""
    started = time.monotonic()
    last = [""]

    def progress() -> None:
        note(f"  {label}: {time.monotonic() - started:.0f}s so far ({last[0][:100]})")

    with heartbeat(progress), open(log, "a") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd, errors="replace"
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            if line.strip():
                last[0] = line.strip()
        rc = process.wait()
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        sys.stderr.write("\n".join(tail) + "\n")
        raise RuntimeError(f"{label} failed (exit {rc}); its whole log: {log}")
    return time.monotonic() - started


def one_build_of(name: str):
    """One build of an image at a time on this machine; a second caller waits and then finds the tar."""
    return one_at_a_time(images_dir() / f"{name}.lock", name, note)
