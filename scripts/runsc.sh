#!/usr/bin/env bash
# gVisor's runsc, Cove's second isolation runtime (cove server --runtime runsc): the pinned
# version, built once into bin/ without cgo, with its version in bin/runsc.version. Newer
# versions need sidecar binaries that cannot be fetched on this machine class: stay on the pin.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNSC_VER=v0.0.0-20260905035102-160fafc42237
if [ -x bin/runsc ] && [ "$(cat bin/runsc.version 2>/dev/null)" = "$RUNSC_VER" ]; then
	exit 0
fi
echo "runsc: building gVisor runsc ${RUNSC_VER} into bin/ (a few minutes the first time)"
mkdir -p bin
GOBIN="$PWD/bin" CGO_ENABLED=0 go install -v "gvisor.dev/gvisor/runsc@${RUNSC_VER}" 2>&1 | awk '{ n++; if (n % 50 == 0) printf "runsc: %d packages built\n", n }'
test "${PIPESTATUS[0]}" = 0
echo "$RUNSC_VER" >bin/runsc.version
echo "runsc: ready in bin/runsc"
