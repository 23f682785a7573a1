# Shared checks of the bash CLI tests, sourced after setting $dsmpi (the tool)
# and $tmp (a scratch directory); they count $checks and $failures.
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Python checks import strict_json (JSON with no key twice in one object) from here.
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"

# expect_error CODE SUBSTRING ARGS...: exit CODE, one stderr line with SUBSTRING, empty stdout.
expect_error() {
    local code=$1 needle=$2
    shift 2
    checks=$((checks + 1))
    "$dsmpi" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    local lines
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne "$code" ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$needle" "$tmp/err" || [ -s "$tmp/out" ]; then
        fail "dsmpi $* -> rc $rc, $lines stderr lines: $(head -c 300 "$tmp/err"); expected rc $code with '$needle'"
    fi
}

expect_ok() {
    checks=$((checks + 1))
    if ! "$dsmpi" "$@" >"$tmp/out" 2>"$tmp/err"; then
        fail "dsmpi $* failed: $(head -c 300 "$tmp/err")"
    fi
}
