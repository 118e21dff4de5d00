#!/usr/bin/env bash
# Runs a make command (`make test`'s steps) with KEDA's build beside it: usage: keda-beside.sh MAKE ARGS...
#
# KEDA's build (about 20 CPU-minutes cold; a no-op when cached) is needed only by `make scale-to-zero`, the last
# step of `make test`, whose own `make keda-build` waits for this build (one build per component at a time:
# testenv/artifacts.py). It runs at the lowest priority, so it takes only the CPU that the steps, which mostly
# wait on the control plane, leave idle. In its own process group (setsid), so that a failed step stops it
# rather than waiting for it. setsid also gives it a scheduler autogroup of its own, which Linux shares fairly
# with the others whatever the niceness inside: the group itself is niced (/proc/self/autogroup), or KEDA's
# build takes half the cores from the others (26.7 min against 18.8 for the Kubernetes build in one cold run).
set -uo pipefail
make_command=$1
keda_log=$(mktemp)
setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
  start=$(date +%s); rc=0; nice -n 19 "$0" --no-print-directory keda-build || rc=$?
  echo "== make keda-build (beside the steps) ended rc $rc after $(( $(date +%s) - start ))s"' "$make_command" \
  >"$keda_log" 2>&1 &
keda_pid=$!
rc=0
"$@" || rc=$?
if [ "$rc" -ne 0 ] && kill -0 "$keda_pid" 2>/dev/null; then
  kill -- -"$keda_pid" 2>/dev/null || true
  echo "== the steps failed (rc $rc): KEDA's build beside them stopped"
fi
wait "$keda_pid" || true
cat "$keda_log"
rm -f "$keda_log"
exit "$rc"
