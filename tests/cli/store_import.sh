#!/bin/sh
# dsmpi import: a text cost table into a profile database, end to end.
#   store_import.sh DSMPI WORKDIR
set -u
dsmpi=$1 work=$2
test_name=store_import
. "$(cd "$(dirname "$0")" && pwd)/lib_check.sh"
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1

cat > costs.txt <<'COSTS'
# event key = mean median p10 p90 (seconds) repetitions provenance
gemm fwd bf16 NN m=2048 n=3072 k=1024 = 1.5e-3 1.4e-3 1.3e-3 1.7e-3 20 measured
layernorm fwd bf16 rows=2048 cols=1024 = 2.5e-5
allreduce bwd bf16 bytes=4194304 group=tp:4 nodes=1 per-node=4 conc=2 = 2e-4 2e-4 1.9e-4 2.2e-4 50 measured
COSTS

expect 0 "--help" "$dsmpi" import --help
grep -q -- "--cost-table" out || fail "--help does not list --cost-table"
grep -q "HDF5_USE_FILE_LOCKING=FALSE" out || fail "--help does not mention HDF5_USE_FILE_LOCKING"

expect 0 "first import" "$dsmpi" import --cost-table costs.txt --profile-db db.h5 --fingerprint cpu:test
grep -Eq '^ +cost-table +3 +0 +3 +0 +costs.txt$' out || fail "first import: $(cat out)"
grep -q "holds 3 events for 1 device fingerprints" out || fail "first import totals: $(cat out)"
expect 0 "second import" "$dsmpi" import --cost-table costs.txt --profile-db db.h5 --fingerprint cpu:test --json
grep -q '"events": 3, "comm_samples": 0, "new": 0, "replaced": 3}' out || fail "re-import: $(cat out)"
expect 0 "other device" "$dsmpi" import --cost-table costs.txt --profile-db db.h5 --csv
[ "$(tail -n 1 out)" = "cost-table,costs.txt,3,0,3,0" ] || fail "default fingerprint: $(cat out)"
if command -v h5dump >/dev/null 2>&1; then
    h5dump -d events db.h5 > dump 2>&1 || fail "h5dump cannot read db.h5"
    [ "$(grep -c 'imported,' dump)" -eq 6 ] || fail "h5dump: not 6 events marked imported"
    h5dump -d fingerprints db.h5 | grep -q '"cpu:test"' || fail "h5dump: fingerprint cpu:test missing"
    h5dump -d fingerprints db.h5 | grep -q '"imported"' || fail "h5dump: fingerprint imported missing"
    h5dump -a command_line db.h5 | grep -q "dsmpi import --cost-table costs.txt" ||
        fail "h5dump: command_line attribute"
fi
before=$(cksum < db.h5)

# A file that is not a profile database: refused, untouched.
expect 2 "text file as database" "$dsmpi" import --cost-table costs.txt --profile-db costs.txt
one_line_naming "costs.txt" "text file as database"
grep -q "not an HDF5 file" err || fail "text file as database: $(cat err)"
head -c 3000 db.h5 > truncated.h5
t_before=$(cksum < truncated.h5)
expect 2 "truncated database" "$dsmpi" import --cost-table costs.txt --profile-db truncated.h5
one_line_naming "truncated.h5" "truncated database"
[ "$(cksum < truncated.h5)" = "$t_before" ] || fail "truncated.h5 was modified"

# Bad input: nothing is written.
printf 'gemm fwd bf16 NN m=1 n=1 k=1 = 1e-3\nsoftmax fwd bf16 rows=2 = fast\n' > bad.txt
expect 2 "bad cost table" "$dsmpi" import --cost-table bad.txt --profile-db db.h5
one_line_naming "bad.txt:2" "bad cost table"
expect 2 "missing cost table" "$dsmpi" import --cost-table missing.txt --profile-db db.h5
one_line_naming "missing.txt" "missing cost table"
expect 2 "no --profile-db" "$dsmpi" import --cost-table costs.txt
one_line_naming "profile-db" "no --profile-db"
expect 2 "no source" "$dsmpi" import --profile-db db.h5
one_line_naming "cost-table" "no source"
expect 2 "unknown option" "$dsmpi" import --cost-table costs.txt --profile-db db.h5 --frobnicate
one_line_naming "frobnicate" "unknown option"
expect 2 "missing directory" "$dsmpi" import --cost-table costs.txt --profile-db nowhere/db.h5
one_line_naming "nowhere" "missing directory"
[ "$(cksum < db.h5)" = "$before" ] || fail "db.h5 changed by a failed import"
[ "$(ls | grep -c '\.tmp\.')" -eq 0 ] || fail "temporary files left: $(ls)"

if [ $failures -ne 0 ]; then
    echo "store_import: $failures failures" >&2
    exit 1
fi
cd / && rm -rf "$work"
echo "store_import: all checks passed"
