#!/usr/bin/python3
"""The function-length check: no function in the given folders' .c files is longer than a limit
(80 lines, the function's first line to its closing brace). A function is a top-level brace
block whose opening line ends a declarator ("...) {"); braces in strings, characters and
comments, and preprocessor lines, are skipped. Usage: check_functions.py [--max N] DIR...
Prints one line per function over the limit and exits 1 when there is any."""
import os, re, sys


def code_only(text):
    """text with comments, strings and character constants blanked (line breaks kept)"""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def functions(path):
    """(name, first line, last line) of each top-level function body in a C file"""
    with open(path, errors="replace") as fh:
        lines = [re.sub(r"^\s*#.*", "", l) for l in code_only(fh.read()).split("\n")]  # no preprocessor lines
    depth, out, start, name, head, head_line = 0, [], None, None, "", 0
    for n, line in enumerate(lines, 1):
        for ch in line:
            if depth == 0 and ch not in "{};":
                if not head.strip():
                    head_line = n
                head += ch
            if ch == "{":
                if depth == 0:  # a declarator ends in ")": a function; else a struct, enum or initializer
                    m = re.search(r"(\w+)\s*\([^;]*\)\s*$", head)
                    start, name = (head_line, m.group(1)) if m and "=" not in head else (None, None)
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start is not None:
                    out.append((name, start, n))
                    start = None
            if depth == 0 and ch in "{};":
                head = ""
        if depth == 0:
            head += " "
    return out


def main(argv):
    limit = 80
    if argv[:1] == ["--max"]:
        limit, argv = int(argv[1]), argv[2:]
    bad = 0
    for top in argv:
        for d, _, fs in sorted(os.walk(top)):
            for f in sorted(fs):
                if not f.endswith(".c"):
                    continue
                path = os.path.join(d, f)
                for name, first, last in functions(path):
                    if last - first + 1 > limit:
                        print("%s:%d: %s is %d lines, over %d" % (path, first, name, last - first + 1, limit))
                        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
