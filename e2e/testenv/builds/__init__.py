"""The test bed's binaries, built from Go: the catalogue (``components``) and its build (``binaries``)."""

from .binaries import bin_dir, build, component_dir, component_key, missing_binaries, module_source
from .components import (
    BY_NAME,
    CATALOGUE,
    COMPONENTS,
    GO_DIR,
    KUBERNETES_VERSION,
    PROMETHEUS_OPERATOR_RELEASE,
    PROMETHEUS_RELEASE,
    Component,
    go_module_version,
)

__all__ = [
    "BY_NAME",
    "CATALOGUE",
    "COMPONENTS",
    "GO_DIR",
    "KUBERNETES_VERSION",
    "PROMETHEUS_OPERATOR_RELEASE",
    "PROMETHEUS_RELEASE",
    "Component",
    "bin_dir",
    "build",
    "component_dir",
    "component_key",
    "go_module_version",
    "missing_binaries",
    "module_source",
]
