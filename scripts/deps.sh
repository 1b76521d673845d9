#!/bin/sh
# Installs what `make test` (deps.sh build) or `make bench` (deps.sh bench)
# needs on a fresh Debian machine, and nothing when it is already there.
set -e
want=""
need() { dpkg -s "$1" >/dev/null 2>&1 || want="$want $1"; }

need cmake; need make; need gcc; need g++; need python3; need git; need coreutils; need pkg-config
need valgrind   # its headers (client requests, src/tracking.c) and the memcheck test
if [ "$1" = bench ]; then
  need libmimalloc2.0; need libjemalloc2; need libtcmalloc-minimal4
  need valgrind; need time; need redis-server; need redis-tools; need sqlite3
  # pip fetches mimalloc 3 (bench/mimalloc3.py); Debian only has 2.x.
  python3 -m pip --version >/dev/null 2>&1 || need python3-pip
fi
# The Rust binding's test needs cargo: rustup's if there is one, else
# Debian's. Without it, that one test is skipped (it says so).
rust=""
if [ "$1" != bench ] && ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  dpkg -s cargo >/dev/null 2>&1 || rust=cargo
fi

if [ -n "$want$rust" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  if [ -n "$want" ]; then
    echo "hakmem: installing missing packages:$want" >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $want >/dev/null
  fi
  if [ -n "$rust" ]; then
    echo "hakmem: installing cargo (for the Rust binding's test)" >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cargo >/dev/null ||
      echo "hakmem: could not install cargo: the Rust binding's test will be skipped" >&2
  fi
fi
if [ "$1" = bench ]; then
  python3 "$(dirname "$0")/../bench/mimalloc3.py" install
fi
