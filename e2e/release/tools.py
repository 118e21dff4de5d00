"""The programs a release drives: skopeo (Debian's), and helm, crane, cosign and syft of the test bed's pinned
builds; each call printed with its time, and its output kept for what it answers (a digest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testenv import builds

# built by `make release` before it runs (make's prerequisite `testenv build --only ...`)
BUILT = ("helm", "crane", "cosign", "syft")
DEBIAN = ("skopeo",)


def say(message: str) -> None:
    print(f"[release] {message}", file=sys.stderr, flush=True)


def binary(name: str) -> str:
    if name in DEBIAN:
        found = shutil.which(name)
        if found is None:
            raise SystemExit(f"release: {name} is not installed (Debian's package {name}; make release installs it)")
        return found
    path = builds.bin_dir() / name
    if not path.exists():
        raise SystemExit(f"release: {path} missing; build it with `python -m testenv build --only {name}`")
    return str(path)


def run(what: str, name: str, *args: str, env: dict[str, str] | None = None, secret: str | None = None) -> str:
    """Run ``name`` with ``args`` (``what``: the progress line); its stdout, or an exit with its own words.
    ``secret``: a value to blank out of anything printed."""
    started = time.monotonic()
    say(f"{what} ...")
    result = subprocess.run(
        [binary(name), *args], env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        words = (result.stderr.strip() or result.stdout.strip())[-3000:]
        if secret:
            words = words.replace(secret, "***")
        raise SystemExit(f"release: {what} failed ({name} exited {result.returncode}):\n{words}")
    say(f"{what}: done in {time.monotonic() - started:.1f}s")
    return result.stdout


def git_revision(repo: Path) -> str:
    result = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "unknown"
