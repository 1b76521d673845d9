#!/bin/sh
# Real programs under LD_PRELOAD=libhakmem.so: each runs once without and
# once with the preload, and the outputs and exit codes must be identical.
# A run that crashes, prints a hakmem error, or differs fails the test.
#
#   tests/preload_programs.sh path/to/libhakmem.so [path/to/preload_check]
#
# preload_check, when given, first proves the preload takes effect.
set -u

LIB=${1:?usage: preload_programs.sh path/to/libhakmem.so [preload_check]}
CHECK_PROGRAM=${2:-}
case $LIB in /*) ;; *) LIB=$(pwd)/$LIB ;; esac
[ -f "$LIB" ] || { echo "no such library: $LIB" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-preload.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'rm -rf "$WORK"; exit 130' INT TERM

# Same environment for both runs; nothing time- or locale-dependent.
export LC_ALL=C TZ=UTC HOME="$WORK/home" PYTHONHASHSEED=0 PYTHONMALLOC=malloc
# git must not see the caller's repository or configuration (a hook, an
# inherited index, signing settings in an XDG config).
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY XDG_CONFIG_HOME
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=hakmem GIT_AUTHOR_EMAIL=hakmem@example.invalid
export GIT_COMMITTER_NAME=hakmem GIT_COMMITTER_EMAIL=hakmem@example.invalid
mkdir -p "$HOME"

failures=0
passes=0

# run_both NAME SHELL-COMMAND: the command runs in a fresh directory
# $WORK/NAME.{plain,preload}, with $OUT pointing at it; its stdout and exit
# code are compared.
run_both() {
    name=$1 cmd=$2
    for mode in plain preload; do
        dir="$WORK/$name.$mode"
        mkdir -p "$dir"
        if [ $mode = preload ]; then pre=$LIB; else pre=; fi
        (cd "$dir" && OUT=$dir LD_PRELOAD=$pre sh -c "$cmd") >"$dir.stdout" 2>"$dir.stderr"
        echo $? >"$dir.rc"
    done
    p="$WORK/$name.plain" q="$WORK/$name.preload"
    why=
    if [ "$(cat "$p.rc")" != 0 ]; then why="fails even without hakmem (exit $(cat "$p.rc"))"
    elif [ ! -s "$p.stdout" ]; then why="printed nothing: nothing to compare"
    elif [ "$(cat "$q.rc")" != 0 ]; then why="exit code $(cat "$q.rc") under hakmem"
    elif grep -q 'hakmem: error' "$q.stderr"; then why="hakmem reported an error"
    elif ! cmp -s "$p.stdout" "$q.stdout"; then why="output differs under hakmem"
    fi
    if [ -z "$why" ]; then
        passes=$((passes + 1))
        echo "ok   $name ($(wc -c <"$p.stdout") bytes of output identical)"
    else
        failures=$((failures + 1))
        echo "FAIL $name: $why"
        echo "     command: LD_PRELOAD=$LIB sh -c '$cmd'"
        diff "$p.stdout" "$q.stdout" | head -n 10 | sed 's/^/     /'
        sed 's/^/     stderr: /' "$q.stderr" | head -n 20
    fi
}

if [ -n "$CHECK_PROGRAM" ]; then
    if LD_PRELOAD=$LIB "$CHECK_PROGRAM" hakmem >"$WORK/check.out" 2>&1; then
        passes=$((passes + 1))
        echo "ok   preload takes effect"
    else
        failures=$((failures + 1))
        echo "FAIL preload does not take effect:"
        sed 's/^/     /' "$WORK/check.out"
    fi
fi

PYTHON=$(command -v python3)
# pyenv and friends install a shell shim: preload the real interpreter.
PYTHON=$("$PYTHON" -c 'import sys; print(sys.executable)')

cat >"$WORK/churn.py" <<'EOF'
# dict/list/str churn with a deterministic checksum
import hashlib
h = hashlib.sha256()
state = 12345
def rnd():
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    return state >> 33
for round in range(30):
    d = {}
    for i in range(20000):
        k = "k%d_%d" % (rnd() % 5000, round)
        d[k] = d.get(k, "") + "x" * (rnd() % 40)
    lst = sorted(d.items())
    big = "".join(v for _, v in lst[:2000])
    chunks = [big[i:i + 7] for i in range(0, len(big), 7)]
    nested = [[j] * (j % 17) for j in range(3000)]
    h.update(("%d %d %d %d" % (len(d), len(big), len(chunks), sum(map(len, nested)))).encode())
    for k, v in lst[::97]:
        h.update(k.encode() + v.encode())
print(h.hexdigest())
EOF
run_both python "'$PYTHON' '$WORK/churn.py'"

# 200k deterministic lines; sort with two threads and a small buffer, so it
# merges temporary runs too.
awk 'BEGIN { x = 1; for (i = 0; i < 200000; i++) { x = (x * 69069 + 1) % 4294967296;
             printf "%d line-%d %x\n", x % 100000, i, x } }' >"$WORK/lines.txt"
run_both sort "sort --parallel=2 -S 4M -T \"\$OUT\" '$WORK/lines.txt' | cksum; sort -n -k1,1 -k2,2 '$WORK/lines.txt' | tail -n 3"

# The compiler: the object code and a run of the compiled program.
cat >"$WORK/prog.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct node { struct node *next; char name[24]; unsigned long v; };
int main(void) {
    struct node *head = NULL;
    unsigned long sum = 0;
    for (unsigned long i = 0; i < 100000; i++) {
        struct node *n = malloc(sizeof *n);
        snprintf(n->name, sizeof n->name, "n%lu", i * 2654435761ul % 1000003);
        n->v = strlen(n->name) * i;
        n->next = head;
        head = n;
    }
    while (head) { struct node *n = head; sum += n->v ^ (unsigned char)n->name[1]; head = n->next; free(n); }
    printf("%lu\n", sum);
    return 0;
}
EOF
run_both gcc "gcc -O2 -c -I'$HERE/../include' -I'$HERE' '$HERE/test_realloc.c' -o t.o && nm t.o && cksum <t.o &&
              gcc -O2 '$WORK/prog.c' -o prog && ./prog"

# git: fixed dates, so commit hashes are identical in both runs.
run_both git '
    export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
    git init -q -b main repo && cd repo &&
    for i in 1 2 3 4 5 6; do
        seq 1 $((i * 5000)) | sed "s/^/line $i /" >file$i.txt
        git add . && git commit -q -m "commit $i" || exit 1
    done &&
    git rm -q file2.txt && git commit -q -m "remove" &&
    git gc -q && git log --stat --format="%H %s" && git rev-parse HEAD && git fsck 2>&1'

run_both ls 'ls -lR /usr/include | wc && ls -lR /usr/include | cksum'

# tar + gzip round trip: the archive bytes and the extracted tree.
run_both tar "tar -cf - -C /usr/include linux | gzip -9 -n >a.tgz && cksum <a.tgz &&
              mkdir x && gzip -dc a.tgz | tar -xf - -C x && diff -r /usr/include/linux x/linux && echo same-tree"

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
