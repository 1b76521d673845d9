#!/bin/sh
# Installs what `make test` (deps.sh build) or `make bench` (deps.sh bench)
# needs on a fresh Debian machine, and nothing when it is already there.
set -e
want=""
need() { dpkg -s "$1" >/dev/null 2>&1 || want="$want $1"; }

need cmake; need make; need gcc; need g++; need python3; need git; need coreutils
if [ "$1" = bench ]; then
  need libmimalloc2.0; need libjemalloc2; need libtcmalloc-minimal4
  need valgrind; need time; need redis-server; need redis-tools
fi
[ -z "$want" ] && exit 0

echo "hakmem: installing missing packages:$want" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $want >/dev/null
