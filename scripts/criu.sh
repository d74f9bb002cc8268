#!/usr/bin/env bash
# Builds CRIU 4.1.1, what Cove's snapshot pause needs, into /usr/local/sbin/criu: Debian 12
# packages CRIU 3.17, which fails on current kernels. The source is Debian trixie's (through
# apt's deb-src, from the mirror this machine already uses), with Cove's patches for Linux
# 6.16+, for running without CAP_SYS_RESOURCE, and for machines whose hardware breakpoints
# never fire, and for faster snapshots on machines where processes and page faults are slow
# (scripts/criu/*.patch). About two minutes.
# Idempotent; prints what it does.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
version=4.1.1
# Network locking off by default (a sandbox's network is its own namespace); no GnuTLS (the
# TLS page server is not used, and its ten libraries cost every criu exec 3-4 ms to load).
flags=(NO_GNUTLS=1 USERCFLAGS=-DNETWORK_LOCK_DEFAULT=NETWORK_LOCK_SKIP)
stamp=/usr/local/share/cove/criu-$version-$( (cat scripts/criu/*.patch; echo "${flags[*]}") | sha256sum | cut -c1-12)
if [ -x /usr/local/sbin/criu ] && [ -f "$stamp" ]; then
	echo "criu: $(/usr/local/sbin/criu --version | head -1) ready"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "criu: building CRIU $version needs root" >&2
	exit 1
fi
src=/etc/apt/sources.list.d/cove-criu-src.sources
if [ ! -f "$src" ]; then
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	if [ -z "$mirror" ]; then
		echo "criu: no Debian mirror found in /etc/apt/sources.list.d/debian.sources" >&2
		exit 1
	fi
	echo "criu: adding trixie's source packages (deb-src) from $mirror"
	printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" >"$src"
fi
echo "criu: installing build dependencies"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dpkg-dev gcc make pkg-config \
	libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf \
	libnl-3-dev libnet1-dev libcap-dev libbsd-dev >/dev/null
work=$(mktemp -d /var/tmp/cove-criu.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "criu: fetching the source of CRIU $version"
apt-get source --download-only "criu=$version-1" >/dev/null 2>&1 || true # the orig tarball is all we need
if [ ! -f "criu_$version.orig.tar.xz" ]; then
	echo "criu: could not fetch criu_$version.orig.tar.xz" >&2
	exit 1
fi
tar xf "criu_$version.orig.tar.xz"
cd "criu-$version"
for p in "$here"/scripts/criu/*.patch; do
	echo "criu: applying $(basename "$p")"
	patch -p1 -s <"$p"
done
echo "criu: building (about two minutes)"
make -j"$(nproc)" criu "${flags[@]}" >build.log 2>&1 || { tail -30 build.log >&2; exit 1; }
install -m 0755 criu/criu /usr/local/sbin/criu
mkdir -p "$(dirname "$stamp")"
touch "$stamp"
echo "criu: $(/usr/local/sbin/criu --version | head -1) installed in /usr/local/sbin"
