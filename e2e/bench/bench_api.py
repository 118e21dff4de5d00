"""The operator bench's view of the API server: a small counting client, and one watch per resource type.

Plain urllib3 with the control plane's certificates, so that the bench measures the API
server and the operator, not a client library; apart from ``operator_bench.py`` so that
its measurement reads as the steps it takes.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

# ---- a small API client: urllib3 with the control plane's certificates -------------------------


class Api:
    """Plain HTTP to the API server; every request it makes is counted (verb, resource) for the breakdown."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path, connections: int):
        self.server = server
        self.http = urllib3.PoolManager(
            num_pools=2,
            maxsize=connections,
            ca_certs=str(ca),
            cert_file=str(cert),
            key_file=str(key),
            retries=False,
            timeout=urllib3.Timeout(connect=10, read=120),
        )
        self.own: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def count(self, verb: str, resource: str) -> None:
        with self._lock:
            self.own[(verb, resource)] += 1

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        response = self.http.request(method, self.server + path, body=data, headers=headers)
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {response.data[:500]!r}")
        return json.loads(response.data) if response.data[:1] == b"{" else response.data.decode()

    def metrics(self) -> str:
        return self.http.request("GET", self.server + "/metrics").data.decode()


# ---- one watch per resource type, counting ---------------------------------------------------------


@dataclass
class Watch:
    """List, then watch, one resource type in the namespace; keeps a small summary per object.

    ``summarize`` turns an object into a dict of fields; ``flags`` names what is true
    of a summary ("exists", "ready", ...). The watch keeps how many objects carry
    each flag, and the first moment that count reached ``target`` (``reached``), so
    a milestone's time is the arrival of the event that completed it, not when a
    waiter woke up. ``changed[name][field]`` is when a field last changed.
    """

    api: Api
    path: str
    summarize: Callable[[dict], dict]
    flags: Callable[[dict], set[str]]
    objects: dict[str, dict] = field(default_factory=dict)
    changed: dict[str, dict[str, float]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    reached: dict[str, float] = field(default_factory=dict)
    target: int = 0
    events: int = 0
    condition: threading.Condition = field(default_factory=threading.Condition)
    stopping: bool = False

    def start(self) -> None:
        version = self._list()
        threading.Thread(target=self._run, args=(version,), daemon=True).start()

    def expect(self, target: int) -> None:
        with self.condition:
            self.target, self.reached = target, {}
            self._check(time.monotonic())

    def _list(self) -> str:
        self.api.count("LIST", self.path)
        listed = self.api.call("GET", self.path)
        now = time.monotonic()
        with self.condition:
            for name in list(self.objects):
                self._update(name, None, now)
            for item in listed["items"]:
                self._update(item["metadata"]["name"], item, now)
            self.condition.notify_all()
        return listed["metadata"]["resourceVersion"]

    def _run(self, version: str) -> None:
        while not self.stopping:
            url = f"{self.api.server}{self.path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=280"
            try:
                self.api.count("WATCH", self.path)
                response = self.api.http.request(
                    "GET",
                    f"{url}&resourceVersion={version}",
                    preload_content=False,
                    timeout=urllib3.Timeout(connect=10, read=330),
                )
                for line in response:
                    event = json.loads(line)
                    now = time.monotonic()
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        version = self._list()  # 410 Gone: the history was compacted
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if kind == "BOOKMARK":
                        continue
                    with self.condition:
                        self.events += 1
                        self._update(obj["metadata"]["name"], None if kind == "DELETED" else obj, now)
                        self.condition.notify_all()
                response.release_conn()
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                if self.stopping:
                    return
                time.sleep(0.5)  # noqa: TID251 the pause before the watch reconnects

    def _update(self, name: str, obj: dict | None, now: float) -> None:
        old = self.objects.get(name)
        new = self.summarize(obj) if obj is not None else None
        old_flags = self.flags(old) if old is not None else set()
        new_flags = self.flags(new) if new is not None else set()
        for flag in old_flags - new_flags:
            self.counts[flag] -= 1
        for flag in new_flags - old_flags:
            self.counts[flag] += 1
        if new is None:
            self.objects.pop(name, None)
        else:
            self.objects[name] = new
            times = self.changed.setdefault(name, {})
            for key, value in new.items():
                if old is None or old.get(key) != value:
                    times[key] = now
        self._check(now)

    def _check(self, now: float) -> None:
        if self.target:
            for flag, count in self.counts.items():
                if count >= self.target and flag not in self.reached:
                    self.reached[flag] = now

    def wait(self, predicate: Callable[[Watch], bool], timeout: float) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: predicate(self), timeout)
