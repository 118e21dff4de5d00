"""reward-operator run as its own process against a cluster, as a user runs it (``reward-operator run``).

The one way the e2e tests, the chaos tests and the operator bench start the operator:
its environment, its metrics and liveness ports, a start that returns once the
liveness endpoint answers, its log kept in one file across restarts, and the ways a
test ends it (a clean stop, or kill -9).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from reward_testing.operator_metrics import reward_model_reconciles
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

# The console script next to this interpreter: what `pip install` gives a user.
REWARD_OPERATOR = Path(sys.executable).parent / "reward-operator"
DRIFT_ENV = "REWARD_OPERATOR_DRIFT_INTERVAL"
LOG_TAIL = 4000  # characters of the log a failure message carries


class OperatorProcess:
    """`reward-operator run <args> -A` with the kubeconfig ``kubeconfig``; start, stop, kill and start again.

    ``env``: variables set for the process over this one's environment (a value of None removes
    the variable, so the operator's own default applies); ``bin_dir`` goes first on its PATH;
    ``command``: another program in place of ``reward-operator`` (the same arguments follow).
    Its output goes to ``log_path``, appended across restarts. Used as a context manager, it is
    started on entry and stopped on exit (E2E_SHOW_OPERATOR_LOG=1 prints its log then).
    """

    def __init__(
        self,
        kubeconfig: str | Path,
        log_path: Path,
        *,
        args: Sequence[str] = ("--standalone",),
        env: Mapping[str, str | None] | None = None,
        bin_dir: Path | None = None,
        command: Sequence[str] = (str(REWARD_OPERATOR),),
        name: str = "operator",
    ):
        self.name = name
        self.log_path = log_path
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.liveness_url = f"http://127.0.0.1:{free_port()}/healthz"
        self.command = [*command, "run", *args, "-A", f"--liveness={self.liveness_url}"]
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig), REWARD_OPERATOR_METRICS_PORT=str(self.metrics_port))
        if bin_dir is not None:
            self.env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
        self.set_env(env or {})
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0

    def set_env(self, changes: Mapping[str, str | None]) -> None:
        """Change the environment of the next start (None removes a variable)."""
        for key, value in changes.items():
            if value is None:
                self.env.pop(key, None)
            else:
                self.env[key] = value

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def start(self, timeout: float = 60) -> OperatorProcess:
        """Start it and return once its liveness endpoint answers; fails with its log if it exits first."""
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.starts += 1
        try:
            wait_until(f"{self.name}'s liveness endpoint", self._started, timeout=timeout)
        except BaseException:
            self.stop()  # a start that failed leaves no process behind
            raise
        return self

    def _started(self) -> bool:
        assert self.alive(), f"{self.name} exited:\n{self.log()[-LOG_TAIL:]}"
        return self.live()

    def live(self) -> bool:
        """Whether its liveness endpoint answers 200 now."""
        try:
            with urllib.request.urlopen(self.liveness_url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9: no shutdown handlers, no cleanup of kopf's annotations or peering record."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.kills += 1

    def stop(self, grace: float = 20) -> None:
        """SIGTERM (kopf's own shutdown), then SIGKILL after ``grace`` seconds."""
        if not self.alive():
            return
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_lines(self, *needles: str) -> list[str]:
        """The lines of its log that hold any of ``needles``."""
        return [line for line in self.log().splitlines() if any(needle in line for needle in needles)]

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            return response.read().decode()

    def reconciles(self) -> float:
        """RewardModel reconciles finished since this process started, from its own metrics."""
        return reward_model_reconciles(self.metrics_url)

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
        if os.environ.get("E2E_SHOW_OPERATOR_LOG"):
            print(self.log())
