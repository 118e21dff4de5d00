"""What the test bed builds and keeps between runs: the cache it lives in, and one catalogue kind for all of it.

Binaries (``builds``: one wrapper Go module each) and the real node's images (``images``: one tar each) are
both catalogues of named artifacts, some built by a plain build (CI's) and the others only when named, each
cached under a key of its inputs and built by one process at a time on the machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Generic, Protocol, TypeVar


def cache_root() -> Path:
    """``$REWARD_OPERATOR_CACHE``, else ``~/.cache/reward-operator`` (or under ``$XDG_CACHE_HOME``)."""
    base = os.environ.get("REWARD_OPERATOR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "reward-operator"
    )
    return Path(base)


class Artifact(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def default(self) -> bool: ...  # built by a plain build (CI's); the others only when named


Item = TypeVar("Item", bound=Artifact)


class Catalogue(Generic[Item]):
    """The artifacts of one kind, in their order, by name."""

    def __init__(self, kind: str, items: Iterable[Item]):
        self.kind = kind
        self.items = tuple(items)
        self.by_name = {item.name: item for item in self.items}
        if len(self.by_name) != len(self.items):
            raise ValueError(f"two {kind}s share a name")

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def __getitem__(self, name: str) -> Item:
        return self.by_name[name]

    def select(self, only: Iterable[str] | None = None) -> tuple[Item, ...]:
        """The artifacts named in ``only`` (the default ones when None), in catalogue order; an unknown name
        is refused with the names there are."""
        if only is None:
            return tuple(item for item in self.items if item.default)
        names = set(only)
        if unknown := names - self.by_name.keys():
            raise ValueError(f"unknown {self.kind}(s) {', '.join(sorted(unknown))}; known: {', '.join(self.by_name)}")
        return tuple(item for item in self.items if item.name in names)


@contextlib.contextmanager
def one_at_a_time(lock_path: Path, what: str, log: Callable[[str], None]):
    """One build of ``what`` at a time on this machine (a file lock): CI starts KEDA's build and the
    images in the background (.ci/run), and a target that needs one waits here for that build instead
    of starting its own; the caller then checks again for what the other build made."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build of {what} (another process holds {lock.name})")
            waited = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)
            log(f"  {what}: the other build ended after {time.monotonic() - waited:.0f}s of waiting")
        yield


@contextlib.contextmanager
def heartbeat(report: Callable[[], None], every: float = 30):
    """Call ``report`` every ``every`` seconds while the block runs: progress lines on long steps."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            report()

    threading.Thread(target=beat, daemon=True).start()
    try:
        yield
    finally:
        done.set()
