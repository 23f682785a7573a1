#!/bin/sh
# expect.sh CODE REGEX COMMAND [ARGS...]: runs COMMAND, passes when it exits
# with CODE and its output (stdout and stderr) matches the extended REGEX.
code=$1
regex=$2
shift 2
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
if [ "$status" -ne "$code" ]; then
    echo "expect.sh: exit code $status, expected $code" >&2
    exit 1
fi
if ! printf '%s\n' "$output" | grep -Eq -- "$regex"; then
    echo "expect.sh: output does not match '$regex'" >&2
    exit 1
fi
exit 0
