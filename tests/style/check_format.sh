#!/bin/sh
# The sources follow .clang-format: clang-format --dry-run -Werror on every
# C, CUDA and header file of the library, the tool and the tests.
# Usage: check_format.sh SOURCE_DIR.  Exit 77 (skipped) without clang-format.
set -eu
root=${1:?usage: check_format.sh SOURCE_DIR}
format=""
for candidate in clang-format clang-format-14 clang-format-15 clang-format-16; do
    if command -v "$candidate" >/dev/null 2>&1; then
        format=$candidate
        break
    fi
done
if [ -z "$format" ]; then
    echo "check_format: clang-format is not installed (Debian: clang-format); skipped"
    exit 77
fi
cd "$root"
files=$(find include libdsmpi apps tests -name '*.c' -o -name '*.h' -o -name '*.cu' | sort)
count=$(echo "$files" | wc -l)
# shellcheck disable=SC2086
if ! $format --dry-run -Werror $files; then
    echo "check_format: files above differ from .clang-format ($($format --version));" \
         "fix with: $format -i FILE"
    exit 1
fi
echo "check_format: $count files follow .clang-format ($($format --version | head -1))"
