#!/bin/sh
# Builds dsmpi for SimGrid's SMPI (CC=smpicc, -DDSMPI_SMPI=ON) in a build
# tree of its own: the SMPI half of the smpi tests and of
# tests/bench/smpi_validate.sh.  Incremental after the first time.
# Usage: build_smpi.sh SOURCE_DIR BUILD_DIR [WERROR(ON|OFF)]
# Exit 77 (skipped) when smpicc is not installed (Debian: libsimgrid-dev).
set -eu
src=$1
dir=$2
werror=${3:-OFF}
if ! command -v smpicc >/dev/null 2>&1 || ! command -v smpirun >/dev/null 2>&1; then
    echo "build_smpi.sh: smpicc/smpirun not found (Debian package libsimgrid-dev): skipped"
    exit 77
fi
mkdir -p "$dir"
if [ ! -f "$dir/CMakeCache.txt" ]; then
    CC=smpicc cmake -S "$src" -B "$dir" -DDSMPI_SMPI=ON -DDSMPI_WERROR="$werror" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir/configure.log" 2>&1 ||
        { cat "$dir/configure.log"; exit 1; }
fi
cmake --build "$dir" --target dsmpi_tool -j2
test -x "$dir/apps/dsmpi/dsmpi"
