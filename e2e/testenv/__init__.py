"""A real local Kubernetes control plane for tests, built from Go modules.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as local processes on loopback,
the approach of controller-runtime's envtest plus the parts that make Deployments produce Running pods;
beside them the add-ons asked for (``addons``: KServe's manager, its LocalModel controller, KEDA,
kube-router, prometheus-operator) and the real node (``node``). ``plane.controlplane.ControlPlane`` owns and
wires them; ``images`` and ``builds`` make what they run; ``pytest_plugin`` gives tests their clusters. The
layers are linted (pyproject.toml); ARCHITECTURE.md's test-bed part has the map and how to add a
component. See ``python -m testenv``.
"""
