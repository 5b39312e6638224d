#!/usr/bin/python3
"""The layer check (make check-layers): the source folders form layers, base -> kernels -> comm ->
model -> shard -> data/ckpt -> run -> main, and a file may include, and its object may call, only
what its own layer or a lower one defines, and of the lower ones only those the graph USES gives
it (data/ uses neither kernels/, model/ nor shard/). Inside data/ the stages are layers too: format ->
source -> text -> rows -> build -> loader (data/data.h, the one header the rest uses, is
loader's). ckpt/, shard/ and run/ name no model family.
Usage: check_layers.py [--objects BUILD_DIR] [ROOT]
Prints one line per violation and exits 1 when there is any."""
import os, re, subprocess, sys

LAYERS = [["base"], ["kernels"], ["comm"], ["model"], ["shard"], ["data", "ckpt"], ["run"], ["main.c"]]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# the graph: what each folder may use below it (every lower layer, unless listed here)
USES = {"data": {"base", "comm"}, "main.c": {"base", "comm", "run"}}
SOURCES = (".c", ".h", ".cu", ".cuh", ".cpp")


def layer_of(rel):
    """the layer of a path relative to the root, or None outside the layered folders"""
    top = rel.split(os.sep, 1)[0]
    return RANK.get(top)


def layer_name(i):
    return "/".join(LAYERS[i])


def outside_graph(mine, theirs):
    """a line's end when folder `mine` reaches the lower folder `theirs` that USES does not give it"""
    if mine == theirs or mine not in USES or theirs in USES[mine] or RANK[theirs] >= RANK[mine]:
        return None
    return f"{theirs}), which {mine.rstrip('/')} does not use (it uses {', '.join(sorted(USES[mine]))})"


DATA_STAGES = ["format", "source", "text", "rows", "build", "loader"]


def stage_of(rel):
    """the data/ stage of a path relative to the root (an index of DATA_STAGES), None outside data/"""
    parts = rel.split(os.sep)
    if parts[0] != "data":
        return None
    return DATA_STAGES.index(parts[1]) if len(parts) > 2 and parts[1] in DATA_STAGES else len(DATA_STAGES) - 1


def stage_above(mine, theirs):
    """a line naming the violation when a data/ file at `mine` reaches `theirs`, a later stage"""
    a, b = stage_of(mine), stage_of(theirs)
    if a is None or b is None or b <= a:
        return None
    return f"data/{DATA_STAGES[b]}), above its own stage (data/{DATA_STAGES[a]})"


def check_includes(root):
    bad = []
    for top in RANK:
        path = os.path.join(root, top)
        files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(SOURCES)]
        for f in sorted(files):
            rel = os.path.relpath(f, root)
            mine = layer_of(rel)
            with open(f, errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m:
                        continue
                    target = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(f), m.group(1))), root)
                    if not os.path.exists(os.path.join(root, target)):
                        target = os.path.normpath(m.group(1))  # from the root (-I.)
                    theirs = layer_of(target)
                    if theirs is not None and theirs > mine:
                        bad.append(f"{rel}:{n}: includes {m.group(1)} ({layer_name(theirs)}), above its own layer ({layer_name(mine)})")
                    elif theirs is not None and outside_graph(rel.split(os.sep, 1)[0], target.split(os.sep, 1)[0]):
                        bad.append(f"{rel}:{n}: includes {m.group(1)} ({outside_graph(rel.split(os.sep, 1)[0], target.split(os.sep, 1)[0])}")
                    elif stage_above(rel, target):
                        bad.append(f"{rel}:{n}: includes {m.group(1)} ({stage_above(rel, target)}")
    return bad


# the rooms that must not know the model families (a family is one file in model/ plus a table entry)
FAMILY_FREE = ["ckpt", "shard", "run"]
# but the command line's own text: flags' help lines and the seed recipes' defaults name the
# families they apply to
FAMILY_TEXT = {os.path.join("run", "flags.c"), os.path.join("run", "recipes.c")}
# spellings of today's families beside their descriptors' names
FAMILY_ALIASES = {"llama2", "gpt", "gpt2"}


def check_families(root):
    words = set(FAMILY_ALIASES)
    model = os.path.join(root, "model")
    for f in os.listdir(model) if os.path.isdir(model) else []:
        if f.endswith(".c"):
            text = open(os.path.join(root, "model", f), errors="replace").read()
            words |= {m.lower() for m in re.findall(r'\.(?:model_type|short_name|display) = "([^"]+)"', text)}
    pat = re.compile(r"(?<![A-Za-z0-9_])(%s)(?![A-Za-z0-9_])" % "|".join(sorted(map(re.escape, words))), re.I)
    bad = []
    for top in FAMILY_FREE:
        for d, _, fs in os.walk(os.path.join(root, top)):
            for f in sorted(fs):
                path = os.path.join(d, f)
                if os.path.relpath(path, root) in FAMILY_TEXT:
                    continue
                with open(path, errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = pat.search(line)
                        if m:
                            bad.append(f"{os.path.relpath(path, root)}:{n}: names the model family '{m.group(1)}' (families live in model/)")
    return bad


def symbols(obj):
    out = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True, text=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if len(l.split()) >= 3}
    out = subprocess.run(["nm", "-u", obj], capture_output=True, text=True).stdout
    undefined = {l.split()[-1] for l in out.splitlines() if l.split()}
    return defined, undefined


def check_calls(root, build):
    """an object's undefined symbols that an object of a higher layer defines"""
    objs = []
    for d, _, fs in os.walk(build):
        for f in fs:
            if f.endswith(".o"):
                rel = os.path.relpath(os.path.join(d, f), build)
                stem = os.path.join(root, rel[:-2])
                if (layer_of(rel) is not None or rel == "main.o") and any(os.path.exists(stem + e) for e in (".c", ".cu", ".cpp")):
                    objs.append(rel)  # not a stale object of a source moved away
    owner, needs = {}, {}
    for rel in objs:
        defined, undefined = symbols(os.path.join(build, rel))
        lay = RANK["main.c"] if rel == "main.o" else layer_of(rel)
        for s in defined:
            owner[s] = (lay, rel)
        needs[rel] = (lay, undefined)
    bad = []
    for rel in sorted(needs):
        lay, undefined = needs[rel]
        for s in sorted(undefined):
            if s in owner and owner[s][0] > lay:
                bad.append(f"{rel[:-2]}: calls {s} ({owner[s][1][:-2]}, {layer_name(owner[s][0])}), above its own layer ({layer_name(lay)})")
            elif s in owner and outside_graph("main.c" if rel == "main.o" else rel.split(os.sep, 1)[0], owner[s][1].split(os.sep, 1)[0]):
                me = "main.c" if rel == "main.o" else rel.split(os.sep, 1)[0]
                bad.append(f"{rel[:-2]}: calls {s} ({owner[s][1][:-2]}, {outside_graph(me, owner[s][1].split(os.sep, 1)[0])}")
            elif s in owner and stage_above(rel, owner[s][1]):
                bad.append(f"{rel[:-2]}: calls {s} ({owner[s][1][:-2]}, {stage_above(rel, owner[s][1])}")
    return bad


def main(argv):
    build = None
    if len(argv) > 1 and argv[1] == "--objects":
        build, argv = argv[2], argv[2:]
    root = argv[1] if len(argv) > 1 else "."
    bad = check_includes(root) + check_families(root) + (check_calls(root, build) if build else [])
    for b in bad:
        print("layers: " + b)
    print(f"layers: {len(bad)} violation(s) of base -> kernels -> comm -> model -> shard -> data/ckpt -> run -> main "
          f"(data: {' -> '.join(DATA_STAGES)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
