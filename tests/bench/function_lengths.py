#!/usr/bin/env python3
"""Longest functions of the C sources, for keeping functions short.

    function_lengths.py [--top N] [--max LINES] PATH...

Prints the N longest function definitions under the given files or folders
(lines from the opening brace to the closing one, both counted).  With
--max, exits 1 when a function is longer than LINES, naming each.

The sources follow .clang-format (Linux braces): a function body opens with
"{" alone at column 0 and closes with "}" at column 0, so no C parser is
needed; the name is the last identifier before "(" on the lines above.
"""
import argparse
import os
import re
import sys

NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


def c_files(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, _, names in os.walk(path):
            for name in sorted(names):
                if name.endswith((".c", ".cu")):
                    yield os.path.join(root, name)


def functions(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = None
    for i, line in enumerate(lines):
        if line == "{" and start is None:
            start = i
        elif line.startswith("}") and start is not None:
            # The signature: the lines above the brace back to a blank one.
            head = []
            j = start - 1
            while j >= 0 and lines[j].strip() and not lines[j].startswith(("}", "#", "/*", " *")):
                head.insert(0, lines[j])
                j -= 1
            names = NAME.findall(" ".join(head))
            if names and not line.startswith("};"):
                yield names[0], start + 1, i - start + 1
            start = None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--max", type=int, default=0)
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    found = []
    for path in c_files(args.paths):
        for name, line, length in functions(path):
            found.append((length, path, line, name))
    found.sort(key=lambda f: (-f[0], f[1], f[2]))
    print(f"{len(found)} functions; the {min(args.top, len(found))} longest:")
    for length, path, line, name in found[: args.top]:
        print(f"{length:6d}  {path}:{line}  {name}")
    if args.max:
        over = [f for f in found if f[0] > args.max]
        for length, path, line, name in over:
            print(f"function_lengths: {path}:{line} {name} has {length} lines (at most {args.max})",
                  file=sys.stderr)
        return 1 if over else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
