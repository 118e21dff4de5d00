"""Build the control-plane binaries from the wrapper modules in ``go/``.

Each wrapper module pins one upstream release in its go.mod/go.sum. Binaries go
to a cache outside the repository whose folder name is a hash of those files, so
a second build is a no-op and a version bump builds into a fresh folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from reward_testing import versions

GO_DIR = Path(__file__).resolve().parent / "go"


@dataclass(frozen=True)
class Component:
    """One wrapper module and the binaries it yields."""

    module_dir: str
    binaries: dict[str, str]  # binary name -> Go package
    # the upstream Go module the wrapper requires, and its release (versions.env; a test ties the two)
    upstream: tuple[str, str]
    ldflags: str = ""
    tags: str = ""  # go build -tags
    # built by a plain `build` (make testenv-build, CI); the others only when named (--only) or
    # when a control plane that runs them starts
    default: bool = True


def _kubernetes_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


KUBERNETES_VERSION = "v" + versions.KUBERNETES  # as its Go module and its binaries spell it
PROMETHEUS_RELEASE = versions.PROMETHEUS
PROMETHEUS_OPERATOR_RELEASE = versions.PROMETHEUS_OPERATOR


def go_module_version(module: str, release: str) -> str:
    """The Go module version of an upstream release: a "v" in front, and Prometheus's own rule: Go's major
    version rule keeps its module at v0, so release 3.16.0 is v0.316.0 (Prometheus 3 puts its major version
    in the hundreds of the minor) and 2.54.1 is v0.54.1."""
    if module != "github.com/prometheus/prometheus":
        return f"v{release}"
    major, minor, patch = (int(part) for part in release.split("."))
    return f"v0.{minor + 100 * major if major >= 3 else minor}.{patch}"


COMPONENTS = (
    Component(
        "kubernetes",
        {
            name: f"k8s.io/kubernetes/cmd/{name}"
            # kubelet and kube-proxy: the real node (see node.py)
            for name in (
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubectl",
                "kubelet",
                "kube-proxy",
            )
        },
        upstream=("k8s.io/kubernetes", versions.KUBERNETES),
        ldflags=_kubernetes_ldflags(KUBERNETES_VERSION),
    ),
    Component(
        "etcd", {"etcd": "go.etcd.io/etcd/server/v3"}, ("go.etcd.io/etcd/server/v3", versions.PINS["ETCD_VERSION"])
    ),
    Component("kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}, ("sigs.k8s.io/kwok", versions.PINS["KWOK_VERSION"])),
    Component("helm", {"helm": "helm.sh/helm/v3/cmd/helm"}, ("helm.sh/helm/v3", versions.PINS["HELM_VERSION"])),
    # remove_all_sd: Prometheus's own tag that leaves out its service discoveries (every cloud's SDK),
    # which the rule and query checks never use: 4.2 min cold alone instead of about 6.4
    Component(
        "promtool",
        {"promtool": "github.com/prometheus/prometheus/cmd/promtool"},
        ("github.com/prometheus/prometheus", versions.PROMETHEUS),
        tags="remove_all_sd",
    ),
    Component(
        "kserve",
        {
            "kserve-manager": "github.com/kserve/kserve/cmd/manager",
            "kserve-router": "github.com/kserve/kserve/cmd/router",
            "kserve-localmodel": "github.com/kserve/kserve/cmd/localmodel",
            # KServe's node agent (its reconciler) behind our entry point: see go/kserve/localmodelnode
            "kserve-localmodelnode": "reward-operator.dev/testenv/kserve/localmodelnode",
        },
        ("github.com/kserve/kserve", versions.KSERVE),
    ),
    # The real node (node.py) beside kwok's fake ones: containerd with its runc shim and ctr (which
    # imports the images built here); btrfs needs cgo headers, and overlayfs is the snapshotter here
    Component(
        "containerd",
        {
            name: f"github.com/containerd/containerd/v2/cmd/{name}"
            for name in ("containerd", "containerd-shim-runc-v2", "ctr")
        },
        ("github.com/containerd/containerd/v2", versions.CONTAINERD),
        tags="no_btrfs",
        # what `containerd --version` and the kubelet's runtime version say (its default is "dev")
        ldflags="-X github.com/containerd/containerd/v2/version.Version=" + f"v{versions.CONTAINERD}",
    ),
    Component(
        "cni",
        {
            name: f"github.com/containernetworking/plugins/plugins/{kind}/{name}"
            for kind, name in (("main", "bridge"), ("ipam", "host-local"), ("meta", "portmap"), ("main", "loopback"))
        },
        ("github.com/containernetworking/plugins", versions.PINS["CNI_PLUGINS_VERSION"]),
    ),
    Component(
        "coredns",
        {"coredns": "github.com/coredns/coredns"},
        ("github.com/coredns/coredns", versions.PINS["COREDNS_VERSION"]),
    ),
    # `make prometheus-real` only: the Prometheus server of promtool's release (go/prometheus pins the
    # same github.com/prometheus/prometheus version), with the one service discovery the configuration
    # prometheus-operator writes uses (Kubernetes); its build info says the release, as upstream's does
    Component(
        "prometheus",
        {"prometheus": "github.com/prometheus/prometheus/cmd/prometheus"},
        ("github.com/prometheus/prometheus", versions.PROMETHEUS),
        tags="remove_all_sd enable_kubernetes_sd",
        ldflags=f"-X github.com/prometheus/common/version.Version={PROMETHEUS_RELEASE}",
        default=False,
    ),
    # `make prometheus-real` only: prometheus-operator, which turns the chart's ServiceMonitor, PodMonitor
    # and PrometheusRule into that Prometheus's configuration, and the reloader it runs beside Prometheus
    Component(
        "prometheus-operator",
        {
            name: f"github.com/prometheus-operator/prometheus-operator/cmd/{package}"
            for name, package in (
                ("prometheus-operator", "operator"),
                ("prometheus-config-reloader", "prometheus-config-reloader"),
            )
        },
        ("github.com/prometheus-operator/prometheus-operator", versions.PROMETHEUS_OPERATOR),
        ldflags=f"-X github.com/prometheus/common/version.Version={PROMETHEUS_OPERATOR_RELEASE}",
        default=False,
    ),
    # `make network-policy-real` only: kube-router's firewall, which enforces NetworkPolicies on the real node
    # with iptables and ipsets (SIG Network's kube-network-policies needs the kernel's NFT_QUEUE, which this
    # machine's lacks: docs/network-policy.md); its routing and service proxy stay off (node.py has both)
    Component(
        "kube-router",
        {"kube-router": "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"},
        ("github.com/cloudnativelabs/kube-router/v2", versions.KUBE_ROUTER),
        ldflags="-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=" + f"v{versions.KUBE_ROUTER}",
        default=False,
    ),
    # KEDA's operator (ScaledObjects: the HPA it owns, scaling 0 <-> 1 itself) and its
    # external metrics API server (what the HPA asks for 1..N); see keda.py. The version
    # its logs print is set the way KEDA's Makefile sets it (the default says "main").
    Component(
        "keda",
        {
            "keda-operator": "github.com/kedacore/keda/v2/cmd/operator",
            "keda-adapter": "github.com/kedacore/keda/v2/cmd/adapter",
        },
        ("github.com/kedacore/keda/v2", versions.KEDA),
        ldflags="-X github.com/kedacore/keda/v2/version.Version=" + versions.KEDA,
        # Not in the default build: only `make scale-to-zero` (in `make test`) and `make keda-test` run
        # it, each through `make keda-build`. It is the longest build (about 20 CPU-minutes), so CI
        # runs that build in the background at low priority beside everything else (.ci/run).
        default=False,
    ),
)
BY_NAME = {component.module_dir: component for component in COMPONENTS}


@functools.cache
def module_source(module: str, version: str) -> Path:
    """The folder of a Go module's source, downloaded (or found) in the Go module cache: where the
    components' CRDs and manifests are read from, at the version their binaries are built from."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=scratch,  # outside any module: a plain download
            capture_output=True,
            text=True,
            env=dict(os.environ, GOFLAGS="-mod=mod"),
        )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"cannot download {module}@{version}: {info.get('Error') or result.stderr.strip()}")
    return Path(info["Dir"])


def select(only: Iterable[str] | None = None) -> tuple[Component, ...]:
    """The components named in ``only`` (the default ones when None), refusing unknown names."""
    if only is None:
        return tuple(c for c in COMPONENTS if c.default)
    names = set(only)
    if unknown := names - BY_NAME.keys():
        raise ValueError(f"unknown testenv component(s) {', '.join(sorted(unknown))}; known: {', '.join(BY_NAME)}")
    return tuple(c for c in COMPONENTS if c.module_dir in names)


def cache_root() -> Path:
    base = os.environ.get("REWARD_OPERATOR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "reward-operator"
    )
    return Path(base)


def component_key(component: Component) -> str:
    """A hash of what decides a component's binaries: its go.mod, go.sum, Go sources of our own
    (an entry point in the wrapper module), binaries and ldflags."""
    module = GO_DIR / component.module_dir
    digest = hashlib.sha256()
    for path in [module / "go.mod", module / "go.sum", *sorted(module.rglob("*.go"))]:
        digest.update(str(path.relative_to(module)).encode())
        digest.update(path.read_bytes())
    digest.update(json.dumps(component.binaries, sort_keys=True).encode())
    digest.update(component.ldflags.encode())
    digest.update(component.tags.encode())
    digest.update(json.dumps([GO_BUILD_FLAGS, GO_LDFLAGS, GO_BUILD_ENV]).encode())
    return digest.hexdigest()[:12]


def component_dir(component: Component) -> Path:
    # One folder per component, so a new or bumped tool builds only itself.
    return cache_root() / "testenv" / "components" / f"{component.module_dir}-{component_key(component)}"


def bin_dir() -> Path:
    """One folder holding every binary (links into the component folders), for PATH."""
    override = os.environ.get("TESTENV_BIN_DIR")
    if override:
        return Path(override)
    digest = hashlib.sha256("".join(component_key(c) for c in COMPONENTS).encode()).hexdigest()[:12]
    return cache_root() / "testenv" / f"k8s-{KUBERNETES_VERSION}-{digest}" / "bin"


def missing_binaries(only: Iterable[str] | None = None) -> list[str]:
    target = bin_dir()
    return [name for c in select(only) for name in c.binaries if not (target / name).is_file()]


def _log(message: str) -> None:
    print(f"[testenv build] {message}", file=sys.stderr, flush=True)


# Flags of every build, chosen for a cold CI on 2 cores where the Go builds are the longest step: no
# debug information (the compiler's DWARF, the linker's symbol table and DWARF), which nothing here
# reads (a panic's stack trace stays), and the compiler's garbage collector run less often (24 GiB
# here). Together 11% less CPU on promtool's cold build (425 -> 380 CPU-seconds).
GO_BUILD_FLAGS = ("-trimpath", "-buildvcs=false", "-gcflags=all=-dwarf=false")
GO_LDFLAGS = "-s -w"
GO_BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOGC": "400"}


def _go_build(component: Component, out_dir: Path) -> None:
    env = dict(os.environ, **GO_BUILD_ENV)
    command = ["go", "build", "-v", *GO_BUILD_FLAGS, "-o", str(out_dir) + os.sep]
    command += ["-ldflags", f"{GO_LDFLAGS} {component.ldflags}".strip()]
    if component.tags:
        command += ["-tags", component.tags]
    command += list(component.binaries.values())
    started = time.monotonic()
    compiled = 0
    process = subprocess.Popen(
        command,
        cwd=GO_DIR / component.module_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []

    def progress() -> None:
        _log(f"  {component.module_dir}: {compiled} packages compiled, {time.monotonic() - started:.0f}s so far")

    with heartbeat(progress):
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if not line.startswith(("go: downloading", "go: finding")):
                compiled += 1
    if process.wait() != 0:
        sys.stderr.write("".join(output[-60:]))
        raise RuntimeError(f"go build failed for go/{component.module_dir}")
    _log(f"  {component.module_dir}: done in {time.monotonic() - started:.0f}s")


def _go_output_name(package: str) -> str:
    """The file name `go build -o dir/` gives a main package (major-version suffixes dropped)."""
    parts = package.split("/")
    if len(parts) > 1 and parts[-1].startswith("v") and parts[-1][1:].isdigit():
        return parts[-2]
    return parts[-1]


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


def _build_into(component: Component, home: Path) -> None:
    if shutil.which("go") is None:
        raise FileNotFoundError("Go 1.26+ is needed to build the test control plane (go not on PATH)")
    _log(f"building {', '.join(component.binaries)} from go/{component.module_dir} into {home}")
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home) as scratch:
        _go_build(component, Path(scratch))
        for name, package in component.binaries.items():
            # rename within one filesystem: a half-written binary is never seen
            os.replace(Path(scratch) / _go_output_name(package), home / name)


def build(force: bool = False, only: Iterable[str] | None = None) -> Path:
    """Build whatever is missing from the cache and return the binary folder.

    ``only`` names the components (``kubernetes``, ``etcd``, ...) to provide; the
    rest are neither built nor linked, so a target builds just what it runs.
    """
    target = bin_dir()
    if os.environ.get("TESTENV_BIN_DIR"):
        if missing := missing_binaries(only):
            raise FileNotFoundError(f"TESTENV_BIN_DIR={target} lacks {', '.join(missing)}")
        return target
    started = time.monotonic()
    target.mkdir(parents=True, exist_ok=True)
    for component in select(only):
        home = component_dir(component)
        if force or not all((home / name).is_file() for name in component.binaries):
            with one_at_a_time(home.parent / f"{home.name}.lock", component.module_dir, _log):
                # again under the lock: a build that held it may have just made them
                if force or not all((home / name).is_file() for name in component.binaries):
                    _build_into(component, home)
        for name in component.binaries:
            link = target / name
            if not link.is_file() or link.resolve() != (home / name).resolve():
                link.unlink(missing_ok=True)
                link.symlink_to(home / name)
    if time.monotonic() - started > 1:
        _log(f"all binaries ready in {time.monotonic() - started:.0f}s")
    return target
