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
