#!/usr/bin/env python3
"""docs_check: what test/meta/test_docs.sh asks of README.md and docs/*.md. Standard library only.

    docs_check.py links ROOT FILE...   one line per broken relative link or #anchor, "FILE:LINE: ..."
                                       (exit 1 when there is any); ROOT is the repository root
    docs_check.py blocks FILE...       the commands of the shell blocks marked `<!-- test -->`, one
                                       record each: "FILE:LINE<TAB>BLOCK<TAB>COMMAND", NUL-terminated
    docs_check.py tree ROOT [FILE...]  docs/DESIGN.md's source-tree table against the tree: one line
                                       per row naming no path that exists, and per folder of source
                                       files (FILE..., else `git ls-files`) that no row names

Anchors follow GitHub's rule: a heading's text, lower-cased, without punctuation but `-` and `_`,
spaces turned into `-`, with `-1`, `-2`, ... after repeats. Links inside code (fenced or
backticked) are not links.
"""
import os
import re
import sys

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+).*?\1")
MARK = "<!-- test -->"


def lines_outside_code(text):
    """(line number, line with code spans blanked) for every line outside fenced blocks."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, CODE_SPAN.sub("", line)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # \w keeps letters, digits and _
    return s.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line in lines_outside_code(open(path, encoding="utf-8").read()):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(2))
                k = seen.get(base, 0)
                seen[base] = k + 1
                out.add(base if k == 0 else "%s-%d" % (base, k))
        cache[path] = out
    return cache[path]


def links(root, files):
    bad = []
    for f in files:
        for n, line in lines_outside_code(open(f, encoding="utf-8").read()):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not checked offline
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                where = "%s:%d: [%s]" % (os.path.relpath(f, root), n, target)
                if not os.path.exists(dest):
                    bad.append("%s: no file %s" % (where, os.path.relpath(dest, root)))
                elif anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
                    bad.append("%s: %s has no heading with the anchor #%s" % (where, os.path.relpath(dest, root), anchor))
    for b in bad:
        print(b)
    return 1 if bad else 0


def blocks(files):
    for f in files:
        lines = open(f, encoding="utf-8").read().split("\n")
        i, nblock = 0, 0
        while i < len(lines):
            if lines[i].strip() != MARK:
                i += 1
                continue
            i += 1
            if i >= len(lines) or not re.match(r"^```(sh|bash)\s*$", lines[i]):
                sys.exit("docs_check.py: %s:%d: %s is not followed by a ```sh block" % (f, i, MARK))
            nblock += 1
            i += 1
            cmd, start = "", 0
            while i < len(lines) and not FENCE.match(lines[i]):
                line = lines[i]
                i += 1
                if not cmd and (not line.strip() or line.lstrip().startswith("#")):
                    continue
                if not cmd:
                    start = i
                if line.endswith("\\"):
                    cmd += line[:-1]
                    continue
                if re.search(r"(\|\||&&|\|)\s*$", line):  # a pipe or list that goes on below
                    cmd += line + " "
                    continue
                cmd += line
                sys.stdout.write("%s:%d\t%d\t%s\0" % (f, start, nblock, cmd.strip()))
                cmd = ""
            if cmd:
                sys.exit("docs_check.py: %s:%d: the block ends inside a command" % (f, start))
            i += 1
    return 0


SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp", ".sh", ".py", ".cjs", ".mjs", ".sbatch", ".yaml")
TREE_HEADING = "## Source tree"


def tree(root, files):
    """docs/DESIGN.md's "Source tree" table: each row's first cell is a backticked path (a folder
    ends with /); every path named must exist, and every folder holding a source file be named."""
    design = os.path.join(root, "docs", "DESIGN.md")
    rows, inside = {}, False
    for n, line in enumerate(open(design).read().split("\n"), 1):
        if line.startswith("## "):
            inside = line.strip() == TREE_HEADING
        m = re.match(r"\|\s*`([^`]+)`\s*\|", line) if inside else None
        if m:
            rows[m.group(1)] = n
    bad = []
    if not rows:
        bad.append("docs/DESIGN.md: no table under '%s'" % TREE_HEADING)
    for path, n in sorted(rows.items()):
        if not os.path.exists(os.path.join(root, path)):
            bad.append("docs/DESIGN.md:%d: `%s` is in the source-tree table but not in the tree" % (n, path))
    # folders two levels deep at most (data/format/, test/unit/): deeper ones are their parent's parts
    folders = {"/".join(os.path.dirname(f).split("/")[:2]) for f in files if f.endswith(SOURCE_EXT)}
    for d in sorted(folders):
        if d and d + "/" not in rows:
            bad.append("%s/: a folder of source files that docs/DESIGN.md's source-tree table does not name" % d)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "tree":
        root = os.path.abspath(sys.argv[2])
        files = sys.argv[3:] or __import__("subprocess").run(["git", "-C", root, "ls-files"], capture_output=True,
                                                               text=True, check=True).stdout.split()
        sys.exit(tree(root, files))
    if len(sys.argv) >= 3 and sys.argv[1] == "links":
        sys.exit(links(os.path.abspath(sys.argv[2]), [os.path.abspath(f) for f in sys.argv[3:]]))
    if len(sys.argv) >= 2 and sys.argv[1] == "blocks":
        sys.exit(blocks(sys.argv[2:]))
    sys.exit(__doc__)
