#!/bin/sh
# The GPU scripts' refusals: a bad option or value exits 2 with one line
# naming it and what is accepted, before anything runs or is written.
# usage: script_usage.sh DIR (tests/gpu)
dir=$1
fails=0
expect() { # WANT_TEXT COMMAND...
    want=$1
    shift
    out=$(OUT=/nonexistent/out "$@" 2>&1)
    rc=$?
    if [ $rc -ne 2 ] || ! printf '%s' "$out" | grep -q -- "$want" || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then
        echo "FAIL: $* -> exit $rc: $out (wanted exit 2 and '$want')"
        fails=$((fails + 1))
    fi
}
expect "--backend 'tpu' is not accepted (accepted: cuda, cpu)" bash "$dir/run_on_device.sh" --backend tpu
expect "--budget 'soon' is not accepted" bash "$dir/run_on_device.sh" --budget soon
expect "--budget 30 is not accepted (accepted: whole seconds, at least 60)" bash "$dir/run_on_device.sh" --budget 30
expect "unknown option '--gpus'" bash "$dir/run_on_device.sh" --gpus 2
expect "'/nonexistent/build' holds no built apps/dsmpi/dsmpi" bash "$dir/carry_runtime.sh" /nonexistent/build
[ -e /nonexistent/out ] && { echo "FAIL: /nonexistent/out was created"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "script_usage: 5 refusals checked"
exit $fails
