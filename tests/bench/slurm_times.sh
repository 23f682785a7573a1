#!/bin/bash
# Wall times of the local Slurm cluster (slurm/local-cluster.sh): bring-up
# from stopped daemons, `srun -n 2 dsmpi allocation`, `sbatch --wait` of the
# profile template with small settings, and down; median, min and max of N
# runs.  Needs root and the Slurm packages.
# Usage: slurm_times.sh [BUILD_DIR] [N]
set -eu
build=$(cd "${1:-build}" && pwd)
runs=${2:-5}
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
dsmpi=$build/apps/dsmpi/dsmpi
cluster=$source_dir/slurm/local-cluster.sh
export DSMPI_SLURM_DIR=/tmp/dsmpi-slurm-bench-$$
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_' || true)
export SLURM_CONF=$DSMPI_SLURM_DIR/slurm.conf
work=$(mktemp -d)
trap '"$cluster" down >/dev/null; rm -rf "$work" "$DSMPI_SLURM_DIR"' EXIT
cd "$work"

ms() { echo $(($(date +%s%N) / 1000000)); }
declare -A times
record() { times[$1]="${times[$1]:-} $2"; }
for _ in $(seq "$runs"); do
    t0=$(ms)
    "$cluster" up >/dev/null
    record "local-cluster.sh up (daemons stopped)" $(($(ms) - t0))
    t0=$(ms)
    "$cluster" up >/dev/null
    record "local-cluster.sh up (already up)" $(($(ms) - t0))
    t0=$(ms)
    srun -Q -n 2 "$dsmpi" allocation >/dev/null
    record "srun -n 2 dsmpi allocation" $(($(ms) - t0))
    t0=$(ms)
    DSMPI=$dsmpi DSMPI_MODEL=gpt2-medium DSMPI_SEQ_LEN=128 DSMPI_GLOBAL_BATCH=16 \
        DSMPI_STRATEGY=tp=2,pp=2,mbs=1 DSMPI_TARGET_NODES=2 DSMPI_TARGET_GPUS_PER_NODE=4 \
        DSMPI_STEPS="allocation events" sbatch --wait -Q --nodes=1 --ntasks-per-node=2 \
        --gpus-per-node=2 --cpus-per-task=1 --time=5 "$source_dir/slurm/dsmpi-profile.sbatch" >/dev/null
    record "sbatch --wait dsmpi-profile.sbatch (allocation, events)" $(($(ms) - t0))
    t0=$(ms)
    "$cluster" down >/dev/null
    record "local-cluster.sh down" $(($(ms) - t0))
done

echo "# local Slurm cluster: wall time (median, min, max over $runs runs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "# %-58s %10s %10s %10s\n" "step" "median_ms" "min_ms" "max_ms"
for step in "local-cluster.sh up (daemons stopped)" "local-cluster.sh up (already up)" \
    "srun -n 2 dsmpi allocation" "sbatch --wait dsmpi-profile.sbatch (allocation, events)" \
    "local-cluster.sh down"; do
    # shellcheck disable=SC2086 # the times are words
    read -r -a sorted <<<"$(printf '%s\n' ${times[$step]} | sort -n | tr '\n' ' ')"
    n=${#sorted[@]}
    printf "  %-58s %10d %10d %10d\n" "$step" "${sorted[$((n / 2))]}" "${sorted[0]}" "${sorted[$((n - 1))]}"
done
