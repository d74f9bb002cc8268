#!/usr/bin/env bash
# Installs what Cove's test suite needs on a Debian machine of this kind: Debian packages
# (runc and busybox-static for the runtime tests, debootstrap for templates, e2fsprogs for sandbox disks, nftables for
# sandbox egress, Node.js and npm
# for the official e2b SDK compat test, prometheus for the alert rules and dashboard test, chromium for the console's browser test, gcc for the race detector, PostgreSQL 15 for the PostgreSQL store's tests) and the pinned npm packages of test/compat.
# Idempotent; prints what it does.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(runc busybox-static debootstrap e2fsprogs procps iproute2 nftables nodejs npm prometheus chromium gcc libc6-dev postgresql-15)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js may come from elsewhere than Debian's package (a newer build on PATH is fine).
if command -v node >/dev/null && command -v npm >/dev/null; then
	missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
fi
read -ra missing <<<"${missing[*]}"
if ((${#missing[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing Debian packages (${missing[*]}); run as root to install them" >&2
		exit 1
	fi
	echo "deps: installing Debian packages: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f test/compat/package.json ]; then
	if [ ! -d test/compat/node_modules/e2b ]; then
		echo "deps: installing the pinned e2b SDK for the compat test"
		(cd test/compat && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; else npm install --no-audit --no-fund --loglevel=error; fi)
	fi
fi
# A real S3-compatible server for the blob store's and the cluster's tests: versitygw, pinned,
# built once into bin/ (a few minutes the first time).
VERSITYGW_VER=v1.8.0
if [ ! -x bin/versitygw ] || [ "$(cat bin/versitygw.version 2>/dev/null)" != "$VERSITYGW_VER" ]; then
	echo "deps: building versitygw ${VERSITYGW_VER} into bin/ (a few minutes the first time)"
	mkdir -p bin
	if GOBIN="$PWD/bin" CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@${VERSITYGW_VER}"; then
		echo "$VERSITYGW_VER" >bin/versitygw.version
	else
		echo "deps: versitygw not built; the S3 blob store tests skip" >&2
	fi
fi
# gVisor's runsc, the second isolation runtime, when asked for (COVE_RUNSC=1, as `make test`
# does): scripts/runsc.sh. Its tests skip without it.
if [ "${COVE_RUNSC:-}" = 1 ]; then
	./scripts/runsc.sh || echo "deps: runsc not built; the runsc runtime tests skip" >&2
fi
# Snapshot pause (CRIU 4): built from source once, about two minutes. Without it pauses
# freeze and the snapshot tests skip, saying why.
./scripts/criu.sh || echo "deps: CRIU 4 not built; pauses will freeze and snapshot tests skip" >&2
echo "deps: ready"
