"""The catalogue of what the test bed builds from Go: one wrapper module per component in ``go/<name>/``.

Each wrapper module requires one upstream release (its go.mod and go.sum: the release versions.env pins, a
test ties the two) and names the packages to build; ``binaries`` builds them into the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reward_testing import versions

from ..artifacts import Catalogue

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
    # more upstream modules the wrapper requires by a release of their own, (module, release) each
    also_upstream: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.module_dir


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
            # kubelet and kube-proxy: the real node (testenv.node)
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
    # The real node (testenv.node) beside kwok's fake ones: containerd with its runc shim and ctr (which
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
    # machine's lacks: docs/network-policy.md); its routing and service proxy stay off (the node has both)
    Component(
        "kube-router",
        {"kube-router": "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"},
        ("github.com/cloudnativelabs/kube-router/v2", versions.KUBE_ROUTER),
        ldflags="-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=" + f"v{versions.KUBE_ROUTER}",
        default=False,
    ),
    # Knative Serving (controller, webhook, autoscaler, activator, queue-proxy) and Kourier's controller, for
    # KServe's Knative mode on the real node (addons/knative.py); each runs there as a pod of its own image
    # (images.catalogue), as Knative's manifests run them. In the default build: the real node runs Knative.
    Component(
        "knative",
        {
            **{
                f"knative-{name}": f"knative.dev/serving/cmd/{name}"
                for name in ("activator", "autoscaler", "controller", "queue", "webhook")
            },
            "knative-kourier": "knative.dev/net-kourier/cmd/kourier",
        },
        ("knative.dev/serving", versions.KNATIVE_SERVING),
        also_upstream=(("knative.dev/net-kourier", versions.KNATIVE_KOURIER),),
    ),
    # versitygw, a real S3 gateway over a POSIX directory: the object store the batch worker's s3:// input and
    # output are tested against offline (reward_testing.object_store), and the local control plane's with
    # TESTENV_OBJECT_STORE=1 (addons/object_store.py). Its version is set the way its Makefile sets it (the
    # default says "git"). In the default build (`make unit` runs it): about 50 s cold on 2 cores.
    Component(
        "versitygw",
        {"versitygw": "github.com/versity/versitygw/cmd/versitygw"},
        ("github.com/versity/versitygw", versions.VERSITYGW),
        ldflags=f"-X=main.Version=v{versions.VERSITYGW}",
    ),
    # KEDA's operator (ScaledObjects: the HPA it owns, scaling 0 <-> 1 itself) and its
    # external metrics API server (what the HPA asks for 1..N); see addons/keda.py. The version
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
    # Kueue's manager (its controllers, scheduler and webhooks in one binary), for the add-on that queues a
    # RewardBatch's Job (addons/kueue.py). Its wrapper stays at Kueue's own k8s.io v0.35.3 and
    # controller-runtime v0.23.3, not the plane's Kubernetes libraries; its logs print the release as Kueue's
    # Makefile sets it (the default says v0.0.0-main). Not in the default build: only a control plane with
    # Kueue (TESTENV_KUEUE=1, `make batch-kueue`) builds it: 4.0 min cold on 2 busy cores, 5.2 CPU-minutes, 138
    # modules downloaded.
    Component(
        "kueue",
        {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
        ("sigs.k8s.io/kueue", versions.KUEUE),
        ldflags=f"-X sigs.k8s.io/kueue/pkg/version.GitVersion=v{versions.KUEUE}",
        default=False,
    ),
    # The release's tools (`make release`, e2e/release), never in a plain build: only a release builds them. Each
    # prints its release the way that release's own binaries do (their ldflags; unset, a build of ours would say
    # "(devel)" or "unknown"). Cold on 2 cores (an empty Go build cache, the modules already downloaded): crane 19 s,
    # cosign 2.3 min (1,765 packages), syft 2.1 min. crane: copies, digests and tags in a registry.
    Component(
        "crane",
        {"crane": "github.com/google/go-containerregistry/cmd/crane"},
        ("github.com/google/go-containerregistry", versions.CRANE),
        ldflags=f"-X github.com/google/go-containerregistry/cmd/crane/cmd.Version={versions.CRANE}",
        default=False,
    ),
    # cosign: the images' and the chart's signatures and the SBOMs' attestations, by key or keyless (CI's OIDC
    # token); `go list -m all` fails in its wrapper on two modules outside the build graph (`-m -e all` lists them)
    Component(
        "cosign",
        {"cosign": "github.com/sigstore/cosign/v3/cmd/cosign"},
        ("github.com/sigstore/cosign/v3", versions.COSIGN),
        ldflags=(
            f"-X sigs.k8s.io/release-utils/version.gitVersion=v{versions.COSIGN}"
            " -X sigs.k8s.io/release-utils/version.gitTreeState=clean"
        ),
        default=False,
    ),
    # syft: the images' SPDX SBOMs. Built as syft's own Linux release is: without cgo (so without the cgo zstd
    # of github.com/DataDog/zstd, which only a cgo build takes in) and with its build tags (containers/image's
    # pure-Go OpenPGP, no btrfs graph driver)
    Component(
        "syft",
        {"syft": "github.com/anchore/syft/cmd/syft"},
        ("github.com/anchore/syft", versions.SYFT),
        tags="containers_image_openpgp exclude_graphdriver_btrfs",
        ldflags=f"-X main.version={versions.SYFT}",
        default=False,
    ),
    # actionlint: the check of .github/workflows that `make lint` runs (its prerequisite builds actionlint alone).
    # In the default build all the same: `make test` runs lint, so its toolchain step builds it beside the rest
    # (16 s cold on 2 cores) rather than lint waiting for it.
    Component(
        "actionlint",
        {"actionlint": "github.com/rhysd/actionlint/cmd/actionlint"},
        ("github.com/rhysd/actionlint", versions.ACTIONLINT),
        ldflags=f"-X github.com/rhysd/actionlint.version={versions.ACTIONLINT}",
    ),
)
CATALOGUE = Catalogue("testenv component", COMPONENTS)
BY_NAME = CATALOGUE.by_name
