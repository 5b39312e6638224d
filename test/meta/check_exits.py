#!/usr/bin/python3
"""The exits check: below run/ (base, kernels, comm, model, shard, data, ckpt) no code ends the job,
except the rank-safe exits base/err.h lists ("exit-ok FILE NAME[,NAME...]: why"). Job-ending calls
are exit, _exit, _Exit, quick_exit, abort, MPI_Abort and comm/'s and base/'s job-ending functions;
err_fatal and the xxxCheck helpers (internal faults, memory) are not input errors and are allowed.
Usage: check_exits.py [ROOT]. Prints one line per call that is not listed and exits 1 when any is."""
import os, re, sys

BELOW_RUN = ["base", "kernels", "comm", "model", "shard", "data", "ckpt"]
ENDERS = ["exit", "_exit", "_Exit", "quick_exit", "abort", "MPI_Abort", "comm_fail_all", "comm_fail_local",
          "comm_abort_all", "comm_check_all", "comm_check_same", "comm_check_distinct_local", "limits_fail_early"]
SOURCES = (".c", ".h", ".cu", ".cuh", ".cpp")
CALL = re.compile(r"(?<![\w.>])(%s)\s*\(" % "|".join(ENDERS))
# a declaration of one of them (its return type before the name) is not a call
DECL = re.compile(r"^\s*(?:static\s+)?(?:void|int|const char \*)\s+\**(%s)\s*\(" % "|".join(ENDERS))


def code_only(text):
    """text with comments, string and character literals blanked (lines kept)"""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def allowed(root):
    """{file: {name, ...}} from base/err.h's exit-ok lines"""
    ok = {}
    for line in open(os.path.join(root, "base", "err.h"), errors="replace"):
        m = re.match(r"\s*//\s*exit-ok (\S+) ([\w,]+):", line)
        if m:
            ok.setdefault(m.group(1), set()).update(m.group(2).split(","))
    return ok


def check(root):
    ok, bad = allowed(root), []
    for top in BELOW_RUN:
        for d, _, fs in os.walk(os.path.join(root, top)):
            for f in sorted(fs):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)
                for n, line in enumerate(code_only(open(path, errors="replace").read()).split("\n"), 1):
                    if DECL.match(line):
                        continue
                    for m in CALL.finditer(line):
                        if m.group(1) not in ok.get(rel, ()):
                            bad.append(f"{rel}:{n}: calls {m.group(1)}, which ends the job below run/: return the error "
                                       "(base/err.h), or list a rank-safe exit there as 'exit-ok FILE NAME: why'")
    return bad


if __name__ == "__main__":
    bad = check(sys.argv[1] if len(sys.argv) > 1 else ".")
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)
