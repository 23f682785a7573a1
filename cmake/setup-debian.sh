#!/bin/sh
# Installs the Debian 12 packages dsmpi needs to build and test: OpenMPI,
# parallel HDF5, OpenBLAS, jansson, zlib (gzip-compressed torch.profiler
# traces; libhdf5-dev depends on it already), CMake, Slurm with munge for the tests
# that run dsmpi under real Slurm daemons (slurm/local-cluster.sh starts
# daemons of its own, in a directory of its own), and SimGrid (smpicc,
# smpirun) for the virtual-cluster tests (label smpi).  Idempotent: quiet when
# everything is present.  Run as root (or with sudo).  The CUDA backend needs
# the CUDA toolkit and NCCL, which are not Debian packages; without them it is
# simply not built.
set -eu

packages="build-essential cmake pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev
hdf5-tools libopenblas-dev libjansson-dev zlib1g-dev python3 munge slurmctld slurmd slurm-client
libsimgrid-dev clang-format"

missing=""
for p in $packages; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "setup-debian.sh: missing packages:$missing; run as root to install them" >&2
        exit 1
    fi
else
    SUDO=
fi
echo "setup-debian.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
