#!/bin/bash
# Packs what tests/gpu/run_on_device.sh needs on a GPU machine that has the
# CUDA toolkit but maybe no MPI, HDF5 or OpenBLAS and no package registry:
#   .device/build/  this build's dsmpi, libdsmpi, the CUDA module and the
#                   cuda-labelled test programs (run there without CTest,
#                   whose files name this machine's paths)
#   .device/debs/   the Debian packages of every library they load (Open MPI
#                   with its components and orted, which a singleton MPI_Init
#                   starts; parallel HDF5, OpenBLAS, jansson, ...), fetched
#                   with apt-get download
#   .device/root/   those packages unpacked with dpkg -x (run_on_device.sh
#                   unpacks the .debs itself where this folder did not travel)
# .device/ is ignored by git.  Carry .device/build and .device/debs (about
# 50 MiB; the size is printed).
#
# usage: tests/gpu/carry_runtime.sh [BUILD_DIR]   (default: build)
# Exit status: 0, 1 when a step failed, 2 on bad usage.
set -euo pipefail

build=${1:-build}
case "$build" in
-h | --help)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
if [ ! -x "$build/apps/dsmpi/dsmpi" ]; then
    echo "carry_runtime.sh: '$build' holds no built apps/dsmpi/dsmpi (accepted: a configured and built build directory)" >&2
    exit 2
fi
for tool in apt-get dpkg dpkg-deb ldd python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "carry_runtime.sh: $tool is not installed (a Debian machine is needed to pack the runtime)" >&2
        exit 1
    fi
done

root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/.device"
mkdir -p "$dest/build/bin" "$dest/build/lib" "$dest/build/tests" "$dest/debs" "$dest/root"

# ---- the build ------------------------------------------------------------------------------
cp -f "$build/apps/dsmpi/dsmpi" "$dest/build/bin/"
cp -af "$build"/libdsmpi/libdsmpi.so* "$dest/build/lib/"
if [ -f "$build/libdsmpi/libdsmpi_cuda.so" ]; then
    cp -f "$build/libdsmpi/libdsmpi_cuda.so" "$dest/build/lib/"
else
    echo "carry_runtime.sh: warning: '$build' has no CUDA module (configure with -DDSMPI_WITH_CUDA=ON)" >&2
fi
# The cuda-labelled tests: program and arguments, one line each (tests.txt);
# paths into the checkout as @REPO@/..., the checkout's place on the device.
ctest --test-dir "$build" -N -L cuda --show-only=json-v1 >"$dest/build/ctest.json"
python3 - "$dest/build/ctest.json" "$dest/build/tests" "$root" <<'EOF'
import json, os, shlex, shutil, sys
tests = json.load(open(sys.argv[1])).get("tests", [])
lines = []
for t in tests:
    command = t.get("command") or []
    # MPI tests run under mpiexec -n 1: keep the program and its arguments.
    program = next((i for i, c in enumerate(command) if os.path.basename(c).startswith("test_")), None)
    if program is None:
        continue
    path = command[program]
    shutil.copy2(path, sys.argv[2])
    args = [a.replace(sys.argv[3], "@REPO@") for a in command[program + 1:]]
    lines.append(" ".join([t["name"], os.path.basename(path)] + [shlex.quote(a) for a in args]))
open(os.path.join(sys.argv[2], "tests.txt"), "w").write("\n".join(lines) + ("\n" if lines else ""))
print("cuda tests:", ", ".join(l.split()[0] for l in lines) or "none")
EOF
rm -f "$dest/build/ctest.json"

# ---- the libraries they load, and Open MPI's components and daemon -----------------------------
ompi_lib=$(dirname "$(ldd "$build/apps/dsmpi/dsmpi" | awk '$1 ~ /^libmpi\.so/ {print $3}')")
objects=("$build/apps/dsmpi/dsmpi" "$build"/libdsmpi/libdsmpi.so.*.* "$dest"/build/tests/test_*)
[ -d "$ompi_lib/openmpi/lib/openmpi3" ] && objects+=("$ompi_lib"/openmpi/lib/openmpi3/*.so)
[ -d /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 ] &&
    objects+=(/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so)
command -v orted >/dev/null && objects+=("$(command -v orted)")
libs=$(for o in "${objects[@]}"; do ldd "$o" 2>/dev/null; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
# The packages owning them; the C and C++ runtimes and CUDA stay the machine's own.
packages=$(for lib in $libs; do
    real=$(readlink -f "$lib")
    dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "/usr$real" 2>/dev/null || true
done | cut -d: -f1 | sort -u | grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6' || true)
packages=$(printf '%s\n' $packages openmpi-bin openmpi-common libopenmpi3 | sort -u)
echo "packages: $(echo $packages | wc -w)"
(cd "$dest/debs" && for p in $packages; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q -o APT::Sandbox::User=root "$p" >/dev/null
done)
for deb in "$dest"/debs/*.deb; do
    dpkg -x "$deb" "$dest/root"
done
du -sh "$dest/build" "$dest/debs" "$dest/root"
# What travels to the device machine is limited (64 MiB with the checkout).
carried=$(du -sm "$dest/build" "$dest/debs" | awk '{total += $1} END {print total}')
if [ "$carried" -gt 56 ]; then
    echo "carry_runtime.sh: warning: .device/build and .device/debs hold $carried MiB; with the checkout they may exceed 64 MiB" >&2
fi
echo "carry: .device/build .device/debs ($carried MiB; unpacked on the device into .device/root)"
