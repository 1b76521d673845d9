#!/bin/sh
# valgrind's memcheck with hakmem preloaded and left in place
# (--soname-synonyms=somalloc=nouserintercepts; by default memcheck would
# replace hakmem's malloc with its own): a clean program reports no error
# and really ran on hakmem, and memcheck still sees hakmem's blocks: a
# use-after-free read, a test of a block's second word the program never
# wrote (hakmem reads it itself, as it tells live blocks from freed), and
# a read past a block (also one realloc cut) are reported as such.
# The secure variant (third argument `secure`) runs the clean program, the
# unwritten second word and the use-after-free read (its quarantine describes the blocks it holds as
# freed); a read past a block stays within its usable size there, which
# the canary's bytes make larger (README, valgrind).
# Leaks are found as definitely lost, whatever the size: no record of
# hakmem's holds a leaked block's address.
# usage: memcheck.sh libhakmem.so memcheck_program [secure]
set -u
lib=$1 prog=$2 variant=${3:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

run() {   # mode: memcheck's output in $out, its exit status returned
  LD_PRELOAD=$lib valgrind --tool=memcheck --soname-synonyms=somalloc=nouserintercepts \
    --error-exitcode=99 --leak-check=no "$prog" "$1" >"$out" 2>&1
}

HAKMEM_STATS=1 run clean; rc=$?
[ $rc -eq 0 ] || fail "clean program: exit $rc"
grep -q "ERROR SUMMARY: 0 errors" "$out" || fail "clean program: memcheck reported errors"
grep -q "^sum " "$out" || fail "clean program did not finish"
grep -q "^segments: [1-9]" "$out" || fail "clean program: hakmem's statistics show no segment (memcheck's malloc ran?)"
echo "ok   clean program: no errors"

LD_PRELOAD=$lib valgrind --tool=memcheck --soname-synonyms=somalloc=nouserintercepts \
  --leak-check=full "$prog" leak >"$out" 2>&1
grep -q "definitely lost: [0-9,]* bytes in 5 blocks" "$out" || fail "leak: the five leaked blocks are not all definitely lost"
grep -q "possibly lost: 0 bytes" "$out" || fail "leak: a block counted possibly lost"
echo "ok   leaked blocks definitely lost"

run use-after-free; rc=$?
[ $rc -eq 99 ] || fail "use-after-free: exit $rc, want memcheck's 99"
grep -q "Invalid read of size 1" "$out" || fail "use-after-free: no invalid read reported"
size=64; [ "$variant" = secure ] && size='[0-9,]*'   # (the secure block holds its canary too)
grep -q "8 bytes inside a block of size $size free'd" "$out" || fail "use-after-free: the block is not named as freed"
echo "ok   use-after-free read reported"

run unwritten-word; rc=$?
[ $rc -eq 99 ] || fail "unwritten second word: exit $rc, want memcheck's 99"
grep -q "Conditional jump or move depends on uninitialised value" "$out" || fail "unwritten second word: not reported"
echo "ok   test of a block's unwritten second word reported"
[ "$variant" = secure ] && exit 0

run overflow; rc=$?
[ $rc -eq 99 ] || fail "overflow: exit $rc, want memcheck's 99"
grep -q "Invalid read of size 1" "$out" || fail "overflow: no invalid read reported"
grep -q "0 bytes after a block of size 80 alloc'd" "$out" || fail "overflow: the block is not named"
echo "ok   read past a block reported"

run read-past-cut; rc=$?
[ $rc -eq 99 ] || fail "read past a cut block: exit $rc, want memcheck's 99"
grep -q "Invalid read of size 1" "$out" || fail "read past a cut block: no invalid read reported"
grep -q "0 bytes after a block of size 5,242,880 alloc'd" "$out" || fail "read past a cut block: the block is not named with its new size"
echo "ok   read past a block realloc cut reported"
