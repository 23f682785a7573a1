#!/bin/bash
# A damaged profile database given to dsmpi predict and search, and to
# dsmpi profile and run (2 ranks; three of the kinds), as --profile-db and as
# --site-db: truncated (to half, to 2 KiB,
# to nothing), one byte flipped in the header, the middle or the end, and a
# text file.  Each is refused with exit 2 and one line naming the file and
# what is wrong with it, and is left byte for byte as it was.
#   fault_db.sh DSMPI MODEL WORKDIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
dsmpi=$1 model=$2 work=$3 mpiexec=$4 npflag=$5
shift 5
preflags=("$@")
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0 checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); "$@" || fail "$case: $*"; }

export DS_MEASURE_BUDGET_S=0.01 DS_MEASURE_MIN_REPS=1 DS_MEASURE_WARMUP=1 DS_PROGRESS_PERIOD_S=0
inputs=(--model "$model" --target-gpus 8 --strategy tp=2,pp=2,mbs=1,gbs=8)
mpirun2() { timeout -k 5 120 "$mpiexec" "$npflag" 2 "${preflags[@]}" "$@"; }
# HDF5 1.10 itself leaks 456 bytes (H5O__attr_exists) when an object header
# fails its checksum, and then says "infinite loop closing library" at exit:
# under the sanitizers, the runs on flipped files also suppress leaks in HDF5.
plain_lsan=${LSAN_OPTIONS:-} flip_lsan=${LSAN_OPTIONS:-}
if [[ "${LSAN_OPTIONS:-}" =~ suppressions=([^:]*) ]]; then
    { cat "${BASH_REMATCH[1]}"; echo "leak:libhdf5"; } >hdf5.supp
    flip_lsan="suppressions=$work/hdf5.supp:print_suppressions=0"
fi

mpirun2 "$dsmpi" profile "${inputs[@]}" --sweep-max 4KiB --profile-db good.h5 --quiet \
    >/dev/null 2>good.err || { echo "the profile failed:" >&2; cat good.err >&2; exit 1; }
size=$(stat -c %s good.h5)

# damaged NAME: a copy of good.h5 with the damage NAME names.
damaged() {
    local name=$1 file=$1.h5
    case $name in
    half) head -c $((size / 2)) good.h5 >"$file" ;;
    head-2k) head -c 2048 good.h5 >"$file" ;;
    empty) : >"$file" ;;
    flip-*)
        cp good.h5 "$file"
        local at=$((size * ${name#flip-} / 100))
        python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^0x5a]))" "$file" "$at"
        ;;
    text) printf 'events = 1\n' >"$file" ;;
    esac
    echo "$file"
}

# refused COMMAND FILE RC ERRFILE: exit 2, one line naming FILE, FILE unchanged.
refused() {
    local command=$1 file=$2 rc=$3 err=$4
    check test "$rc" -eq 2
    check test "$(grep -c "^dsmpi $command: " "$err")" -eq 1
    check grep -qE "^dsmpi $command: .*$file.*(damaged or truncated|not a dsmpi profile database|not HDF5|empty)" "$err"
    check test "$(cksum <"$file")" = "$(cat "$file.sum")"
    if grep -qE 'Sanitizer|runtime error|Segmentation|exited on signal' "$err"; then
        fail "$case: crash: $(grep -m1 -E 'Sanitizer|runtime error|Segmentation|exited on signal' "$err")"
    fi
}

for damage in half head-2k empty flip-1 flip-50 flip-99 text; do
    file=$(damaged "$damage")
    case $damage in flip-*) export LSAN_OPTIONS=$flip_lsan ;; *) export LSAN_OPTIONS=$plain_lsan ;; esac
    cksum <"$file" >"$file.sum"
    case="predict $damage"
    "$dsmpi" predict "${inputs[@]}" --profile-db "$file" >/dev/null 2>err
    refused predict "$file" $? err
    case="predict --site-db $damage"
    "$dsmpi" predict "${inputs[@]}" --profile-db good.h5 --site-db "$file" >/dev/null 2>err
    refused predict "$file" $? err
    case="search $damage"
    "$dsmpi" search --model "$model" --target-gpus 8 --profile-db "$file" >/dev/null 2>err
    refused search "$file" $? err
    # Under MPI (each launch takes a while): three kinds of damage.
    case $damage in half | flip-50 | text) ;; *) continue ;; esac
    case="profile $damage"
    mpirun2 "$dsmpi" profile "${inputs[@]}" --profile-db "$file" --compute-only >/dev/null 2>err
    refused profile "$file" $? err
    case="profile --site-db $damage"
    mpirun2 "$dsmpi" profile "${inputs[@]}" --profile-db fresh.h5 --site-db "$file" --compute-only \
        >/dev/null 2>err
    refused profile "$file" $? err
    check test ! -e fresh.h5
    case="run $damage"
    mpirun2 "$dsmpi" run "${inputs[@]}" --profile-db "$file" --compute-only >/dev/null 2>err
    refused run "$file" $? err
    echo "$damage: $(grep '^dsmpi run: ' err)"
done
echo "fault_db: $checks checks over 7 kinds of damage"
if [ "$failures" -ne 0 ]; then
    echo "fault_db: $failures of $checks checks failed" >&2
    exit 1
fi
rm -rf "$work"
