#!/bin/sh
# The profile database on a file system that fills up or turns read-only:
# a clear error naming the database, the previous database byte for byte
# intact, no temporary file left.  Uses a small tmpfs, so it needs root and
# mount(8); skipped (77) where mounting is not permitted.
#   store_fs.sh PROGRAM WORKDIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
program=$1 work=$2 mpiexec=$3 npflag=$4
shift 4
preflags="$*"
umount "$work/mnt" 2>/dev/null # left mounted by a run that was killed
rm -rf "$work" && mkdir -p "$work/mnt" || exit 1
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=1m dsmpi-test "$work/mnt" 2>/dev/null; then
    echo "store_fs: cannot mount a tmpfs here (needs root); skipped"
    exit 77
fi
trap 'umount "$work/mnt" 2>/dev/null' EXIT
trap 'exit 1' INT TERM
db=$work/mnt/profile.h5
failures=0

run() {
    # shellcheck disable=SC2086
    "$mpiexec" "$npflag" 2 $preflags "$program" "$@"
}
fail() { echo "store_fs: FAILED: $*" >&2; failures=$((failures + 1)); }
expect_error() { # expect_error CASE RC PATTERN: failed, with PATTERN in the message
    [ "$2" -ne 0 ] || fail "$1: the write succeeded"
    message=$(grep '^test_store_mpi: ' "$work/err" | head -n 1)
    echo "store_fs: $1: $message"
    case "$message" in
    *"'$db'"*) ;;
    *) fail "$1: the message does not name $db" ;;
    esac
    echo "$message" | grep -q "$3" || fail "$1: the message does not say '$3'"
    [ "$(cksum < "$db")" = "$before" ] || fail "$1: $db changed"
    run verify "$db" 1 >/dev/null || fail "$1: generation 1 is not intact"
    [ "$(ls -A "$work/mnt")" = "profile.h5" ] || fail "$1: left behind: $(ls -A "$work/mnt")"
}

run write "$db" 1 >/dev/null || { echo "store_fs: the first write failed" >&2; exit 1; }
before=$(cksum < "$db")

# Disk full: 2 x 5000 records need about 2 MB of the 1 MiB.  Refused
# before writing, and (with that check off) when a write runs out of space.
for mode in collective serial; do
    DS_DB_WRITE_MODE=$mode run write "$db" 2 5000 >/dev/null 2>"$work/err"
    expect_error "full ($mode)" $? "No space left on device"
    DS_DB_WRITE_MODE=$mode TEST_STORE_NO_SPACE_CHECK=1 run write "$db" 2 5000 >/dev/null 2>"$work/err"
    expect_error "full half-way ($mode)" $? "No space left on device"
done

# Read-only when opened: refused before any work is done.
mount -o remount,ro "$work/mnt" || fail "cannot remount read-only"
run write "$db" 2 >/dev/null 2>"$work/err"
expect_error "read-only at open" $? "Read-only file system"
mount -o remount,rw "$work/mnt"

# Read-only by the time of the commit.
rm -f "$work/ready" "$work/go"
run write "$db" 2 20 "$work/ready" "$work/go" >/dev/null 2>"$work/err" &
writer=$!
i=0
while [ ! -e "$work/ready" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
mount -o remount,ro "$work/mnt" || fail "cannot remount read-only"
touch "$work/go"
wait $writer
expect_error "read-only at commit" $? "Read-only file system"
mount -o remount,rw "$work/mnt"

if [ $failures -ne 0 ]; then
    echo "store_fs: $failures failures" >&2
    exit 1
fi
echo "store_fs: full and read-only file systems refused, database intact"
