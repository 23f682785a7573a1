# Shared checks of the POSIX sh CLI tests, sourced in the work directory:
# check DESCRIPTION COMMAND... (sets fail=1 when it fails) and
# expect_rc CODE COMMAND... (stdout in out.txt, stderr in err.txt).
check() { # description, command...
    what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
expect_rc() { # rc, command...
    want=$1; shift
    "$@" > out.txt 2> err.txt
    got=$?
    [ "$got" = "$want" ] || { echo "exit $got, expected $want: $*"; cat err.txt; return 1; }
}

# The counting style: fail MESSAGE counts a failure, named by $test_name;
# expect CODE DESCRIPTION COMMAND... (stdout in out, stderr in err);
# one_line_naming TEXT DESCRIPTION: the error is one line on stderr and
# names TEXT.  The script ends with the count of failures.
failures=0
fail() { echo "${test_name:-test}: FAILED: $*" >&2; failures=$((failures + 1)); }
expect() {
    want=$1 what=$2
    shift 2
    "$@" >out 2>err
    got=$?
    [ "$got" -eq "$want" ] || fail "$what: exit $got, expected $want ($(head -c 600 err))"
}
one_line_naming() {
    [ "$(wc -l < err)" -eq 1 ] || fail "$2: stderr has $(wc -l < err) lines: $(cat err)"
    grep -q "$1" err || fail "$2: stderr does not name $1: $(cat err)"
}
