#!/bin/sh
# Runs one test with none of the caller's HAKMEM_* options (nor a preloaded
# allocator): only the settings the test itself names, as VAR=value
# arguments before the program.   run_clean.sh [VAR=value...] program [args...]
for v in $(env | sed -n 's/^\(HAKMEM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset LD_PRELOAD
exec env "$@"
