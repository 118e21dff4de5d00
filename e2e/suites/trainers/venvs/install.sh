#!/usr/bin/env bash
# Builds one trainer's venv for e2e/suites/trainers (`make trainers-venvs`): TRAINER=trl|openrlhf|verl.
#
# Layout, under the test bed's cache ($TRAINERS_CACHE, ~/.cache/reward-operator/trainers):
#   torch-$TORCH_VERSION/     torch and its own requirements (`pip install --target`), made once
#   $TRAINER-$VERSION-venv/   the trainer's venv; a .pth file puts the torch folder on its path
# Why the shared torch folder: PyPI's torch is its CUDA build, 4.6 GB with the NVIDIA wheels it
# cannot import without; three copies of it would be 14 GB and three downloads. Each venv still
# holds its own trainer and its own transformers (their pins disagree: OpenRLHF 0.11.2 wants
# transformers 5.15.0, verl 0.9.1 below 5.11, TRL 1.16 takes the newest).
#
# What each installs is $TRAINER.txt here: the trainer's package, and for OpenRLHF and verl
# (installed --no-deps: their full requirements are deepspeed, vLLM, flash-attn, ... for training
# on GPUs) only what their reward paths import. `pip check` reports those cut requirements: expected.
set -euo pipefail
TRAINER=${TRAINER:?set TRAINER: trl, openrlhf or verl}
here=$(cd "$(dirname "$0")" && pwd)
# the torch of vLLM's CPU build, unless given: versions.env is its home
TORCH_VERSION=${TORCH_VERSION:-$(sed -n 's/^TORCH_VERSION=//p' "$here/../../../../versions.env")}
PYTHON=${PYTHON:-python3}
cache=${TRAINERS_CACHE:-$HOME/.cache/reward-operator/trainers}
requirements=$here/$TRAINER.txt
package=$(grep -m1 -E '^# trainer: ' "$requirements" | sed 's/^# trainer: //')
venv=$cache/${package/==/-}-venv
torch_dir=$cache/torch-$TORCH_VERSION
mkdir -p "$cache"

if [ ! -e "$torch_dir/.complete" ]; then
  echo "torch $TORCH_VERSION: installing into $torch_dir"
  rm -rf "$torch_dir"
  "$PYTHON" -m pip --disable-pip-version-check install --quiet --no-cache-dir --target "$torch_dir" "torch==$TORCH_VERSION"
  # (triton stays, though it has no CPU backend: torch requires it, so pip would put it back
  # into every venv whose packages require torch)
  touch "$torch_dir/.complete"
fi

if [ -e "$venv/.complete" ]; then
  echo "$package: $venv is there"
  exit 0
fi
echo "$package: installing into $venv"
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$torch_dir" >"$site/shared-torch.pth"
"$venv/bin/python" -m pip --disable-pip-version-check install --quiet --no-cache-dir --upgrade pip
# the trainer itself: with its requirements (TRL), or without (the lines marked --no-deps)
{ grep -E '^[^#].*--no-deps' "$requirements" || true; } | sed 's/ *--no-deps//' | while read -r spec; do
  "$venv/bin/python" -m pip --disable-pip-version-check install --quiet --no-cache-dir --no-deps "$spec"
done
grep -E '^[^#]' "$requirements" | { grep -v -- '--no-deps' || true; } >"$venv/requirements.txt"
"$venv/bin/python" -m pip --disable-pip-version-check install --quiet --no-cache-dir -r "$venv/requirements.txt"
touch "$venv/.complete"
echo "$package: installed ($(du -sh "$venv" | cut -f1), torch shared from $torch_dir)"
