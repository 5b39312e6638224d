#!/usr/bin/env bash
# Issue 39, class 4: files that were crafted or swapped. A checkpoint is read only as fsdpc wrote
# it: a tensor or a state group that is a soft link (to another entry of the file: the optimizer's
# state read as weights), an external link (to another file) or a dataset whose data lives
# outside the file (external storage, a virtual dataset) is refused by resume, export and
# --init_from with one line naming the entry, at np=1 and np=2, the file unchanged; checksums
# cannot vouch for such a tensor, since they are read through the link. A FIFO planted where a
# file is read (a lock, a tokenizer, weights, data, a config) is refused at once, never waited on;
# safetensors with bytes no tensor owns, and JSON behind a byte-order mark, are named.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="crafted: "
PY=/usr/bin/python3
M="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128
   --max_context_width 64 --batch_size 4 --num_tokens 0 --num_threads 1 --validation_freq 0"
./fsdpc $M --max_steps 2 --checkpoint_freq 2 --checkpoint_dir "$W/ck" >/dev/null 2>&1
CK=$W/ck/step_00000002.h5
./fsdpc $M --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/other" --seed 7 >/dev/null 2>&1
OTHER=$W/other/step_00000001.h5
T=model.layers.0.mlp.down_proj.weight

# craft KIND OUT: a copy of the checkpoint with one entry replaced by KIND
craft() {
    cp "$CK" "$2"
    $PY - "$1" "$2" "$OTHER" "$T" <<'PYEOF'
import sys, h5py, numpy as np, os
kind, out, other, t = sys.argv[1:]
f = h5py.File(out, "r+")
if kind == "soft":  # the weight read from its own first moment
    del f["model/" + t]
    f["model/" + t] = h5py.SoftLink("/optim/exp_avg/" + t)
elif kind == "external":  # the weight read from another run's file
    del f["model/" + t]
    f["model/" + t] = h5py.ExternalLink(other, "/model/" + t)
elif kind == "group":  # a whole state group read from another entry
    del f["optim/exp_avg_sq"]
    f["optim/exp_avg_sq"] = h5py.SoftLink("/optim/exp_avg")
elif kind == "alias":  # the weight a second name of its first moment (a hard link: one object, one checksum)
    del f["model/" + t]
    f["model/" + t] = f["optim/exp_avg/" + t]
elif kind == "elink":  # the optimizer's group an external link to a FIFO: opening it would wait for ever
    del f["optim"]
    f["optim"] = h5py.ExternalLink(out + ".fifo", "/optim")
    os.mkfifo(out + ".fifo")
elif kind == "storage":  # the bytes in a raw file beside the checkpoint
    old = f["model/" + t]
    data, attrs = old[()], dict(old.attrs)
    del f["model/" + t]
    raw = out + ".raw"
    data.astype("<f4").tofile(raw)
    d = f.create_dataset("model/" + t, shape=data.shape, dtype="<f4", external=[(raw, 0, data.nbytes)])
    for k, v in attrs.items():
        d.attrs[k] = v
elif kind == "virtual":  # a virtual dataset whose source is the other file
    old = f["model/" + t]
    shape, attrs = old.shape, dict(old.attrs)
    del f["model/" + t]
    layout = h5py.VirtualLayout(shape=shape, dtype="<f4")
    layout[...] = h5py.VirtualSource(other, "/model/" + t, shape=shape)
    d = f.create_virtual_dataset("model/" + t, layout)
    for k, v in attrs.items():
        d.attrs[k] = v
f.close()
PYEOF
}

# refused NAME REGEX FILE CMD...: CMD, at np=1 and np=2, ends non-zero with one error line
# matching REGEX, no step trained, and FILE unchanged
refused() {
    local name=$1 re=$2 file=$3 np rc lines sum
    shift 3
    sum=$(sha256sum "$file")
    for np in 1 2; do
        if [ $np = 1 ]; then timeout 60 "$@" >"$W/out" 2>"$W/err"; else timeout 60 $MPI -np 2 "$@" >"$W/out" 2>"$W/err"; fi
        rc=$?
        lines=$(grep -c '^fsdpc: error:' "$W/err")
        [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$lines" = 1 ] && grep -Eq -- "$re" "$W/err" && ! grep -q "^Batch " "$W/err" &&
            [ "$(sha256sum "$file")" = "$sum" ]
        check "np=$np: $name" $? "(rc=$rc, $lines error lines: $(grep -m2 error "$W/err" | head -c 400 | tr '\n' '|'))"
    done
}

for kind in soft external group alias elink storage virtual; do
    F=$W/$kind.h5
    craft $kind "$F" || { check "crafting a $kind entry" 1; continue; }
    case $kind in
        soft) what="/model/$T is a soft link" ;;
        external) what="/model/$T is an external link" ;;
        group) what="/optim/exp_avg_sq is a soft link" ;;
        alias) what="/model/$T is a second name of another entry of the file" ;;
        elink) what="/optim is an external link" ;;
        *) what="/model/$T is a dataset whose data lives outside the file" ;;
    esac
    refused "resume from a checkpoint with a $kind entry" "$what.*only (tensors stored in|what) the checkpoint file itself" "$F" \
        ./fsdpc $M --max_steps 3 --checkpoint_freq 0 --resume_from_checkpoint "$F"
    if [ $kind != group ] && [ $kind != elink ]; then  # weights only: /optim is not read
        refused "--init_from a checkpoint with a $kind entry" "$what" "$F" ./fsdpc $M --max_steps 1 --checkpoint_freq 0 --init_from "$F"
        expect_error "export of a checkpoint with a $kind entry" "$what" ./fsdpc export --checkpoint "$F" --output "$W/x-$kind"
        [ ! -e "$W/x-$kind" ]
        check "... and the export wrote nothing" $?
    fi
done
# the same file untouched resumes: the checks refuse only what was crafted
./fsdpc $M --max_steps 3 --checkpoint_freq 0 --resume_from_checkpoint "$CK" >"$W/ok.log" 2>&1
check "the checkpoint as written resumes" $? "$(grep -m2 error "$W/ok.log")"

# safetensors: the data bytes must be exactly the tensors' (the format forbids holes; a hole or a
# tail could carry another file's content); JSON with a byte-order mark is named
$PY test/ref/hf_make.py "$W/hf" >/dev/null
cp -r "$W/hf" "$W/hole" && cp -r "$W/hf" "$W/tail"
$PY - "$W/hole/model.safetensors" "$W/tail/model.safetensors" <<'PYEOF'
import sys, json, struct
def rewrite(path, hole):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head, data = json.loads(b[8:8 + n]), b[8 + n:]
    if hole:  # 64 foreign bytes before the first tensor: every offset moves
        for k, v in head.items():
            if k != "__metadata__":
                v["data_offsets"] = [o + 64 for o in v["data_offsets"]]
        data = b"x" * 64 + data
    else:
        data += b"#!/bin/sh\necho polyglot\n"
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
rewrite(sys.argv[1], True)
rewrite(sys.argv[2], False)
PYEOF
I="--train_data synthetic --max_steps 1 --checkpoint_freq 0 --num_tokens 0 --num_threads 1"
refused "--init_from safetensors with a hole before its first tensor" "64 data bytes before tensor .* belong to no tensor" \
    "$W/hole/model.safetensors" ./fsdpc --init_from "$W/hole" $I
refused "--init_from safetensors with bytes after its last tensor" "its last 24 bytes belong to no tensor" \
    "$W/tail/model.safetensors" ./fsdpc --init_from "$W/tail" $I
printf '\xef\xbb\xbf{"text": "a row of text with a byte-order mark before it"}\n' >"$W/bom.jsonl"
refused "JSON Lines starting with a UTF-8 byte-order mark" "line 1 is not JSON .*a UTF-8 byte-order mark \(bytes EF BB BF\)" \
    "$W/bom.jsonl" ./fsdpc $M --train_data "$W/bom.jsonl" --max_steps 1 --checkpoint_freq 0

# a FIFO where fsdpc reads a file: refused at once (a FIFO's open would wait for a writer for ever)
mkfifo "$W/fifo"
mkdir -p "$W/fck" && mkfifo "$W/fck/.fsdpc-writer"
mkdir -p "$W/fhf" && cp "$W/hf"/* "$W/fhf/" && rm "$W/fhf/config.json" && mkfifo "$W/fhf/config.json"
mkdir -p "$W/fdata" && head -c 5000 data/tinyshakespeare.txt >"$W/fdata/a.txt" && mkfifo "$W/fdata/b.txt"
MAXSEC=15
fifo() {  # fifo NAME REGEX CMD...: one error line within 15 s at np=1
    local name=$1 re=$2 t0=$SECONDS rc
    shift 2
    timeout 30 "$@" >"$W/out" 2>"$W/err"
    rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c '^fsdpc: error:' "$W/err")" = 1 ] && grep -Eq -- "$re" "$W/err" &&
        [ $((SECONDS - t0)) -le $MAXSEC ]
    check "a FIFO as $name: refused at once" $? "(rc=$rc, $((SECONDS - t0)) s: $(grep -m2 error "$W/err" | head -c 300))"
}
fifo "the checkpoint folder's writer lock" "fsdpc-writer' is not an fsdpc writer lock" ./fsdpc $M --max_steps 1 --checkpoint_freq 1 --checkpoint_dir "$W/fck"
fifo "--tokenizer" "tokenizer '$W/fifo': not a regular file" ./fsdpc $M --tokenizer "$W/fifo" --max_steps 1 --checkpoint_freq 0
fifo "--init_from" "'$W/fifo': not a regular file" ./fsdpc --init_from "$W/fifo" $I
fifo "an --init_from folder's config.json" "config.json' is there but is not a regular file" ./fsdpc --init_from "$W/fhf" $I
fifo "--train_data" "data file '$W/fifo' is not a regular file" ./fsdpc $M --train_data "$W/fifo" --max_steps 1 --checkpoint_freq 0
fifo "a file in a --train_data folder" "data file '$W/fdata/b.txt' is not a regular file" ./fsdpc $M --train_data "$W/fdata" --max_steps 1 \
    --checkpoint_freq 0
fifo "a file in a prepare --input folder" "data file '$W/fdata/b.txt' is not a regular file" ./fsdpc prepare --input "$W/fdata" --output "$W/fprep"
fifo "--resume_from_checkpoint" "'$W/fifo' is neither a file nor a folder" ./fsdpc $M --resume_from_checkpoint "$W/fifo" --max_steps 1
fifo "export --checkpoint" "'$W/fifo'" ./fsdpc export --checkpoint "$W/fifo" --output "$W/fexp"

# the data cache: a key folder swapped for a link to another source's cache is refused; a file
# rewritten with its size and time kept is not served from the stale cache
C="--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128
   --max_context_width 16 --batch_size 2 --num_tokens 0 --num_threads 1 --validation_freq 0 --checkpoint_freq 0 --max_steps 1
   --data_cache_dir $W/cache"
for i in $(seq 1 40); do echo "{\"text\": \"first source row $i: the quick brown fox jumps over the lazy dog\"}"; done >"$W/s1.jsonl"
for i in $(seq 1 40); do echo "{\"text\": \"other source row $i: pack my box with five dozen liquor jugs now\"}"; done >"$W/s2.jsonl"
./fsdpc $C --train_data "$W/s1.jsonl" >"$W/c1.log" 2>&1 && ./fsdpc $C --train_data "$W/s2.jsonl" >"$W/c2.log" 2>&1
k1=$(grep -o "tok-[0-9a-f]*" "$W/c1.log" | head -1) k2=$(grep -o "tok-[0-9a-f]*" "$W/c2.log" | head -1)
[ -n "$k1" ] && [ -n "$k2" ] && [ "$k1" != "$k2" ] && mv "$W/cache/$k1" "$W/cache/saved" && ln -s "$W/cache/$k2" "$W/cache/$k1"
check "two sources' caches built ($k1, $k2), the first's folder swapped for a link to the second's" $? "$(grep -m2 error "$W/c1.log" "$W/c2.log")"
fifo "the data cache folder: a link to another source's cache" "data cache folder '$W/cache/$k1' is a symbolic link" \
    ./fsdpc $C --train_data "$W/s1.jsonl"
rm "$W/cache/$k1" && mv "$W/cache/saved" "$W/cache/$k1"
# the same size and time, other words: a new cache, and the loss of the new text
t=$(stat -c %y "$W/s1.jsonl")
sed -i 's/quick brown fox jumps/QUICK BROWN FOX JUMPS/' "$W/s1.jsonl" && touch -d "$t" "$W/s1.jsonl"
./fsdpc $C --train_data "$W/s1.jsonl" --metrics_file "$W/m-stale.jsonl" >"$W/c3.log" 2>&1
cp "$W/s1.jsonl" "$W/s1b.jsonl"
./fsdpc $C --train_data "$W/s1b.jsonl" --data_cache_dir "$W/cache2" --metrics_file "$W/m-fresh.jsonl" >/dev/null 2>&1
grep "(data cache " "$W/c3.log" | grep -v -q "$k1" && [ "$(losses "$W/m-stale.jsonl")" = "$(losses "$W/m-fresh.jsonl")" ]
check "a data file rewritten with its size and time kept: a new cache, the new text's loss" $? "$(grep -m2 "tok-\|error" "$W/c3.log")"

# a gzip file with bytes after its last member (zlib's gzread would stop there quietly); two
# members in one file are read whole, as gzip reads them
for i in $(seq 1 60); do echo "{\"text\": \"row $i: sphinx of black quartz, judge my vow\"}"; done >"$W/g.jsonl"
gzip -c "$W/g.jsonl" >"$W/garb.jsonl.gz" && printf 'TRAILING BYTES' >>"$W/garb.jsonl.gz"
(head -30 "$W/g.jsonl" | gzip -c; tail -30 "$W/g.jsonl" | gzip -c) >"$W/multi.jsonl.gz"
refused "training on a .jsonl.gz with bytes after its last member" "garb.jsonl.gz': the bytes from byte [0-9]+ on follow its last gzip member" \
    "$W/garb.jsonl.gz" ./fsdpc $M --train_data "$W/garb.jsonl.gz" --max_steps 1 --checkpoint_freq 0 --data_cache_dir "$W/gzc"
refused "prepare of a .jsonl.gz with bytes after its last member" "garb.jsonl.gz': the bytes from byte [0-9]+ on follow its last gzip member" \
    "$W/garb.jsonl.gz" ./fsdpc prepare --input "$W/garb.jsonl.gz" --output "$W/gzp"
./fsdpc prepare --input "$W/multi.jsonl.gz" --output "$W/gzm" >"$W/gzm.log" 2>&1 && grep -q "^prepare: 60 documents" "$W/gzm.log"
check "a gzip file of two members is read whole (60 documents)" $? "$(grep -m2 'error\|documents' "$W/gzm.log")"
