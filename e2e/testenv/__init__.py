"""A real local Kubernetes control plane for tests, built from Go modules.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as
local processes on loopback, the approach of controller-runtime's envtest plus
the parts that make Deployments produce Running pods; with TESTENV_KSERVE=1 also
KServe's manager (``kserve_manager``). See ``python -m testenv``.
"""
