#!/bin/sh
# A set-user-ID program reads no HAKMEM_* option (src/options.c): the same
# statically linked program, run by root with HAKMEM_STATS=1, prints its
# report as a plain program and none once it is set-user-ID (to nobody).
# Exit 77 (skipped) where no set-user-ID program can be made: not root, or
# setuid bits ignored (no_new_privs, a nosuid file system).
#   setuid_options.sh program
program=$1
[ "$(id -u)" = 0 ] || { echo "skipped: making a set-user-ID program needs root"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/hak_setuid.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
cp "$(command -v id)" "$dir/id" && chown 65534 "$dir/id" && chmod 4755 "$dir/id"
[ "$("$dir/id" -u)" = 65534 ] || { echo "skipped: set-user-ID bits have no effect here"; exit 77; }

cp "$program" "$dir/program" || exit 1
HAKMEM_STATS=1 "$dir/program" >/dev/null 2>"$dir/plain.err" || { cat "$dir/plain.err"; exit 1; }
grep -q "hakmem statistics" "$dir/plain.err" || { echo "FAIL: no report from the plain program"; exit 1; }

chown 65534 "$dir/program" && chmod 4755 "$dir/program"
HAKMEM_STATS=1 "$dir/program" >/dev/null 2>"$dir/setuid.err" || { cat "$dir/setuid.err"; exit 1; }
if grep -q "hakmem statistics" "$dir/setuid.err"; then
    echo "FAIL: the set-user-ID program read HAKMEM_STATS"
    exit 1
fi
echo "ok: a report as a plain program, none set-user-ID"
