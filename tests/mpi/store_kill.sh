#!/bin/sh
# A writer killed (SIGKILL, one rank or every rank) at any stage of writing
# the profile database leaves the previous database intact, byte for byte,
# and readable by h5dump; the next run writes it completely and removes the
# temporary file the killed run left.
#   store_kill.sh PROGRAM WORKDIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
program=$1 work=$2 mpiexec=$3 npflag=$4
shift 4
preflags="$*"
rm -rf "$work" && mkdir -p "$work" || exit 1
db=$work/profile.h5
failures=0

run() { # run ARGS...: the program on 2 ranks
    # shellcheck disable=SC2086
    "$mpiexec" "$npflag" 2 $preflags "$program" "$@"
}
fail() { echo "store_kill: FAILED: $*" >&2; failures=$((failures + 1)); }
readable() {
    if command -v h5dump >/dev/null 2>&1; then
        h5dump -H "$db" >/dev/null 2>&1 || fail "$1: h5dump cannot read $db"
        h5dump -d events "$db" >/dev/null 2>&1 || fail "$1: h5dump cannot read the events of $db"
    fi
}

run write "$db" 1 >/dev/null || { echo "store_kill: the first write failed" >&2; exit 1; }
before=$(cksum < "$db")
readable "generation 1"

# stage:victim (-1 = every rank).  Until the file is closed the write is
# collective, so a dead rank stops the others before the rename: the old
# database must be intact and the killed run's temporary file is left.
for case in created:-1 created:1 written:1 written:-1 closed:0 closed:-1; do
    stage=${case%%:*} victim=${case#*:}
    run kill "$db" 2 "$stage" "$victim" >"$work/kill.out" 2>&1
    [ $? -ne 0 ] || fail "$case: the killed run exited 0"
    [ "$(cksum < "$db")" = "$before" ] || fail "$case: $db changed"
    readable "$case"
    run verify "$db" 1 >/dev/null || fail "$case: generation 1 is not intact"
    ls "$work" | grep -q '\.tmp\.' || fail "$case: the killed writer left no temporary file"
done
# Rank 1 killed once the file is complete and closed: rank 0 may or may not
# get to rename it; either way the database is complete.
run kill "$db" 2 closed 1 >"$work/kill.out" 2>&1
if [ "$(cksum < "$db")" = "$before" ]; then
    run verify "$db" 1 >/dev/null || fail "closed:1: generation 1 is not intact"
else
    run verify "$db" 2 >/dev/null || fail "closed:1: generation 2 is not complete"
fi
readable "closed:1"

# Rerun: generation 2 written completely, stale temporaries removed.
run write "$db" 2 >/dev/null || fail "the write after the kills failed"
run verify "$db" 2 >/dev/null || fail "generations 1 and 2 are not both present"
readable "generation 2"
if ls "$work" | grep -q '\.tmp\.'; then fail "temporary files remain: $(ls "$work")"; fi

# Killed after the rename: the new database is complete.
run kill "$db" 3 renamed -1 >/dev/null 2>&1 && fail "renamed: the killed run exited 0"
run verify "$db" 3 >/dev/null || fail "renamed: generation 3 is not complete"
readable "renamed"

if [ $failures -ne 0 ]; then
    echo "store_kill: $failures failures" >&2
    exit 1
fi
rm -rf "$work"
echo "store_kill: every kill left a complete database"
