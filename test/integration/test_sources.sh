#!/usr/bin/env bash
# Input sources: what a data file is, from its content (files made by the real tools: gzip, zstd,
# bzip2, xz, zip, tar, h5py, numpy, apache-arrow, parquet-wasm), and where a Hugging Face dataset's
# files are (save_to_disk and DatasetDict folders, the datasets cache, hub snapshots of blobs and
# relative symlinks, hub names found offline), through build/test_sources.
cd "$(dirname "$0")/../.."
source test/lib.sh
T=build/test_sources
[ -x "$T" ] || { echo "not ok - $T is missing (make $T)"; exit 1; }
for tool in gzip zstd bzip2 xz zip tar; do
    command -v $tool >/dev/null || { echo "not ok - the $tool command is missing (run/install-deps.sh installs it)"; exit 1; }
done

# ---- sniff ----------------------------------------------------------------------------------
S=$W/sniff
mkdir -p "$S"
timeout 120 /usr/bin/python3 - "$S" data/tinyshakespeare.txt <<'PY'
import json, os, struct, sys
import h5py, numpy as np
s, tiny = sys.argv[1], open(sys.argv[2], "rb").read()
def w(name, data): open(f"{s}/{name}", "wb").write(data)
w("text.txt", tiny[:300000])
w("empty.txt", b"")
docs = b"".join(json.dumps({"text": tiny[i:i + 500].decode(), "id": i}).encode() + b"\n" for i in range(0, 200000, 500))
w("docs.jsonl", docs)
w("docs_named.txt", docs)                         # JSON Lines by content, whatever the name
w("lines.json", docs)                             # a .json holding one object per line
w("array.json", json.dumps([{"text": "a"}, {"text": "b"}]).encode())
w("pretty.json", json.dumps({"text": "a", "meta": {"k": 1}}, indent=2).encode())
w("pretty.jsonl", json.dumps({"text": "a", "meta": {"k": 1}}, indent=2).encode())
w("braces.txt", b"{ this is not json }\nplain text after it\n")
w("bad_utf8.jsonl", docs[:5000] + b'{"text": "caf\xe9"}\n' + docs[:5000])
w("latin1.txt", "café crème\n".encode("latin-1") * 100)
w("utf16.txt", "some text\n".encode("utf-16"))
big = bytearray(tiny[:1000000])
big[100000] = 0
w("nul_100000.txt", bytes(big))                   # inside the first sample
big = bytearray(tiny[:1000000])
big[530000] = 0
w("nul_530000.txt", bytes(big))                   # inside a later sample block
# a 3-byte character cut by the end of the first 256 KiB sample; blocks starting mid-character
w("cut_char.txt", b"a" * 262143 + "€".encode() + b"b" * 1000)
w("euro.txt", "€".encode() * 400000)
# token formats
tok = np.frombuffer(tiny[:20000], np.uint8)
hdr = np.zeros(64, np.uint8); hdr[:8] = np.frombuffer(b"FSDPCTOK", np.uint8)
hdr[8:12] = np.frombuffer(np.uint32(1).tobytes(), np.uint8); hdr[12:16] = np.frombuffer(np.uint32(2).tobytes(), np.uint8)
hdr[16:24] = np.frombuffer(np.uint64(len(tok)).tobytes(), np.uint8)
w("tok.bin", hdr.tobytes() + tok.astype(np.uint16).tobytes())
for name, magic, dt in (("llmc_gpt2.bin", 20240520, np.uint16), ("llmc_llama3.bin", 20240801, np.uint32)):
    h = np.zeros(256, np.int32); h[0] = magic; h[1] = 1; h[2] = len(tok)
    w(name, h.tobytes() + tok.astype(dt).tobytes())
w("nanogpt.bin", tok.astype(np.uint16).tobytes())
np.save(f"{s}/ids.npy", tok.astype(np.int32))
head = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
w("model.safetensors", struct.pack("<Q", len(head)) + head + b"\0" * 8)
with h5py.File(f"{s}/rows.h5", "w") as f: f.create_dataset("input_ids", data=tok[:3300].reshape(100, 33).astype(np.uint16))
# a user block larger than the first sample: the superblock at 512 KiB
with h5py.File(f"{s}/userblock.h5", "w", userblock_size=1 << 19) as f: f.create_dataset("input_ids", data=np.zeros((4, 33), np.uint16))
# Arrow and Parquet by hand (the readers' own tests use real writers): an IPC stream's first
# message, a FlatBuffers Message whose header is an (empty) Schema, then end-of-stream
meta = bytearray(40)
struct.pack_into("<I", meta, 0, 16)                # root: the Message table at 16
struct.pack_into("<5H", meta, 4, 10, 12, 4, 6, 8)  # its vtable: sizes, then version, header_type, header
struct.pack_into("<i", meta, 16, 12)               # table -> vtable at 4
struct.pack_into("<h", meta, 20, 4)                # version V5
meta[22] = 1                                       # header_type Schema
struct.pack_into("<I", meta, 24, 8)                # header -> the Schema table at 32
struct.pack_into("<2H", meta, 28, 4, 4)            # its vtable: no fields
struct.pack_into("<i", meta, 32, 4)
stream = b"\xff\xff\xff\xff" + struct.pack("<i", 40) + bytes(meta) + b"\xff\xff\xff\xff\0\0\0\0"
w("mini.arrow", stream)
w("mini_feather.arrow", b"ARROW1\0\0" + stream + b"ARROW1")
bad = bytearray(stream); bad[8 + 22] = 3           # a RecordBatch first: not a stream's start
w("not_arrow.arrow", bytes(bad))
w("odd_len.arrow", b"\xff\xff\xff\xff" + struct.pack("<i", 36) + bytes(meta[:36]))
w("mini.parquet", b"PAR1" + b"\0" * 32 + struct.pack("<I", 32) + b"PAR1")
w("cut.parquet", b"PAR1" + b"\0" * 4000)
w("random.dat", os.urandom(100000))
PY
check "sniff fixtures written with python, h5py and numpy" $?
(
    cd "$S" || exit 1
    gzip -k docs.jsonl && gzip -k text.txt && zstd -q -k docs.jsonl -o docs.jsonl.zst && zstd -q -k text.txt -o text.zst &&
        gzip -c text.txt >gzip_named.txt && gzip -c nanogpt.bin >gz_named.bin && gzip -c random.dat >random.dat.gz &&
        zstd -q -c random.dat >random.zst && gzip -c mini.parquet >mini.parquet.gz && gzip -c mini.arrow >mini.arrow.gz &&
        gzip -c array.json >array.json.gz && gzip -k latin1.txt && zstd -q -c empty.txt >empty.zst && gzip -c empty.txt >empty.txt.gz &&
        { gzip -c text.txt; gzip -c docs.jsonl; } >members.txt.gz &&
        bzip2 -k text.txt && bzip2 -k empty.txt && xz -k text.txt && zip -q text.zip text.txt && tar cf text.tar text.txt &&
        tar czf text.tgz text.txt && zstd -q -c --ultra -22 docs.jsonl >docs_ultra.jsonl.zst &&
        cp docs.jsonl.gz corrupt.jsonl.gz && printf '\377\377\377\377\377\377\377\377\377\377\377\377' |
        dd of=corrupt.jsonl.gz bs=1 seek=30 conv=notrunc status=none && mkfifo fifo && mkdir folder
)
check "compressed fixtures written with gzip, zstd, bzip2, xz, zip and tar" $?

# sniff NAME FILE FORMAT INNER REGEX: REGEX is matched against "readable|what|hint"
sniff() {
    local line fmt inn rest
    line=$($T sniff "$S/$2")
    fmt=$(cut -f2 <<<"$line")
    inn=$(cut -f3 <<<"$line")
    rest=$(cut -f4- <<<"$line" | tr '\t' '|')
    [ "$fmt" = "$3" ] && [ "$inn" = "$4" ] && grep -Eq -- "$5" <<<"$rest"
    check "sniff: $1" $? "(got: $(cut -f2- <<<"$line" | tr '\t' '|' | head -c 300))"
}
sniff "text" text.txt text none '^1\|UTF-8 text\|$'
sniff "empty file" empty.txt empty none '^1\|an empty file'
sniff "JSON Lines" docs.jsonl jsonl none '^1\|JSON Lines\|$'
sniff "JSON Lines named .txt (content wins)" docs_named.txt jsonl none '^1'
sniff "a .json holding one object per line is JSON Lines" lines.json jsonl none '^1'
sniff "a .json array is refused" array.json json_array none "^0\|a JSON array .*\|convert it to JSON Lines.*jq -c '\.\[\]'"
sniff "a pretty-printed .json object is refused" pretty.json json_doc none '^0\|a JSON document spread over several lines'
sniff "a pretty-printed .jsonl is refused" pretty.jsonl json_doc none '^0\|a JSON document'
sniff "text that starts with a brace" braces.txt text none '^1'
sniff ".jsonl with invalid UTF-8" bad_utf8.jsonl binary none "^0\|binary data \(not UTF-8 text: invalid UTF-8 at offset 5013\)\|.*iconv"
sniff "Latin-1 text" latin1.txt binary none '^0\|.*invalid UTF-8 at offset 3\)'
sniff "UTF-16 text" utf16.txt utf16 none '^0\|UTF-16 text\|.*iconv -f UTF-16'
sniff "NUL at byte 100000 of a 1 MB text" nul_100000.txt binary none '^0\|binary data \(not UTF-8 text: a NUL byte at offset 100000\)'
sniff "NUL at byte 530000 of a 1 MB text (a later block)" nul_530000.txt binary none 'a NUL byte at offset 530000'
sniff "a character cut by the sample's end" cut_char.txt text none '^1'
sniff "blocks starting inside a character" euro.txt text none '^1'
sniff "fsdpc token shard" tok.bin tokshard none '^1\|an fsdpc token shard'
sniff "llm.c shard (GPT-2)" llmc_gpt2.bin llmc none '^1\|an llm.c token shard \(GPT-2, uint16 tokens\)'
sniff "llm.c shard (Llama 3)" llmc_llama3.bin llmc none 'Llama 3, uint32'
sniff "nanoGPT .bin by its name" nanogpt.bin nanogpt_bin none '^1\|a nanoGPT token file'
sniff "a .bin that is gzip (content wins)" gz_named.bin gzip nanogpt_bin '^0\|a gzip-compressed nanoGPT token file'
sniff "HDF5" rows.h5 hdf5 none '^1\|an HDF5 file'
sniff "HDF5 after a 512 KiB user block" userblock.h5 hdf5 none '^1'
sniff "NumPy .npy" ids.npy npy none '^0\|a NumPy \.npy array\|.*tofile'
sniff "safetensors" model.safetensors safetensors none '^0\|a safetensors file \(model weights'
sniff "Arrow IPC stream" mini.arrow arrow_stream none '^1\|an Arrow IPC stream\|$'
sniff "Arrow IPC file" mini_feather.arrow arrow_file none '^1\|an Arrow IPC file'
sniff "0xFFFFFFFF, but a RecordBatch first" not_arrow.arrow binary none '^0'
sniff "0xFFFFFFFF, but a metadata length not a multiple of 8" odd_len.arrow binary none '^0'
sniff "Parquet" mini.parquet parquet none '^1\|a Parquet file\|$'
sniff "Parquet without its footer" cut.parquet parquet none '^0\|a truncated Parquet file.*\|.*fetch it again'
sniff "random bytes" random.dat binary none '^0\|binary data \(not text, not a format fsdpc knows\)\|fsdpc reads text, JSON Lines'
sniff "gzip JSON Lines" docs.jsonl.gz gzip jsonl '^1\|gzip-compressed JSON Lines\|$'
sniff "gzip text" text.txt.gz gzip text '^1\|gzip-compressed UTF-8 text'
sniff "a .txt that is gzip" gzip_named.txt gzip text '^1'
sniff "gzip of an empty file" empty.txt.gz gzip empty '^1'
sniff "concatenated gzip members" members.txt.gz gzip text '^1'
sniff "gzip binary" random.dat.gz gzip binary '^0\|gzip-compressed binary data \(not text, not a format fsdpc knows\)'
sniff "gzip Latin-1 text" latin1.txt.gz gzip binary '^0\|gzip-compressed binary data \(not UTF-8 text: invalid UTF-8 at decompressed offset 3\)\|.*iconv'
sniff "gzip Parquet is refused" mini.parquet.gz gzip parquet '^0\|a gzip-compressed Parquet file\|decompress it \(gunzip\)'
sniff "gzip Arrow is refused" mini.arrow.gz gzip arrow_stream '^0\|a gzip-compressed Arrow IPC stream'
sniff "gzip JSON array is refused" array.json.gz gzip json_array "^0\|.*\|decompress it \(gunzip\), then convert it to JSON Lines"
sniff "corrupt gzip" corrupt.jsonl.gz gzip binary '^0\|gzip-compressed data that does not decompress \(.*\)\|.*gzip -t'
sniff "zstd JSON Lines" docs.jsonl.zst zstd jsonl '^1\|zstd-compressed JSON Lines'
sniff "zstd --ultra -22 JSON Lines" docs_ultra.jsonl.zst zstd jsonl '^1'
sniff "zstd text" text.zst zstd text '^1'
sniff "zstd of an empty file" empty.zst zstd empty '^1'
sniff "zstd binary" random.zst zstd binary '^0'
sniff "bzip2" text.txt.bz2 bzip2 none '^0\|bzip2-compressed data\|decompress it \(bunzip2\) or recompress it with gzip or zstd'
sniff "bzip2 of an empty file" empty.txt.bz2 bzip2 none '^0'
sniff "xz" text.txt.xz xz none '^0\|xz-compressed data\|decompress it \(unxz\)'
sniff "zip" text.zip zip none '^0\|a zip archive\|unpack it \(unzip\)'
sniff "tar" text.tar tar none '^0\|a tar archive'
sniff "tar.gz" text.tgz gzip tar '^0\|a gzip-compressed tar archive'
line=$($T sniff "$S/fifo" "$S/folder" "$S/absent")
grep -q "fifo	error	data file '$S/fifo' is not a regular file (a FIFO)" <<<"$line" &&
    grep -q "folder	error	data file '$S/folder' is not a regular file (a folder)" <<<"$line" &&
    grep -q "absent	error	cannot open data file '$S/absent': No such file or directory" <<<"$line"
check "sniff: a FIFO, a folder and a missing file are errors naming them" $? "($line)"

# real Arrow and Parquet files, from apache-arrow and parquet-wasm (npm), when they can be fetched
if ! npm_fetch apache-arrow@21.2.0 parquet-wasm@0.8.0; then
    check "sniff: Arrow and Parquet files written by apache-arrow and parquet-wasm # SKIP $NPM_SKIP" 0
else
    timeout 60 node - "$S" <<'JS'
const fs = require("fs"), arrow = require("apache-arrow"), pq = require("parquet-wasm/node");
const dir = process.argv[2];
const t = arrow.tableFromArrays({ text: ["hello", "world", "again"], id: Int32Array.from([1, 2, 3]) });
fs.writeFileSync(`${dir}/real.arrows`, arrow.tableToIPC(t, "stream"));
fs.writeFileSync(`${dir}/real.feather`, arrow.tableToIPC(t, "file"));
fs.writeFileSync(`${dir}/real.parquet`, pq.writeParquet(pq.Table.fromIPCStream(arrow.tableToIPC(t, "stream"))));
JS
    check "real Arrow and Parquet files written with apache-arrow and parquet-wasm" $?
    sniff "apache-arrow IPC stream" real.arrows arrow_stream none '^1'
    sniff "apache-arrow IPC file" real.feather arrow_file none '^1'
    sniff "parquet-wasm Parquet" real.parquet parquet none '^1'
fi

# ---- source_resolve -------------------------------------------------------------------------
H=$W/hf
export HF_HUB_CACHE=$H/hub HF_DATASETS_CACHE=$H/datasets
unset HF_HOME XDG_CACHE_HOME
ARROW=$S/mini.arrow
mkdir -p "$H"
timeout 60 /usr/bin/python3 - "$H" "$ARROW" <<'PY'
import json, os, sys, time
h, arrow = sys.argv[1], open(sys.argv[2], "rb").read()
def w(path, data=arrow):
    os.makedirs(os.path.dirname(f"{h}/{path}"), exist_ok=True)
    open(f"{h}/{path}", "wb").write(data if isinstance(data, bytes) else data.encode())
def state(folder, files, **extra):
    st = {"_data_files": [{"filename": f} for f in files], "_fingerprint": "f00d", "_format_columns": None,
          "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False, "_split": None, **extra}
    w(f"{folder}/state.json", json.dumps(st, indent=2))
    w(f"{folder}/dataset_info.json", json.dumps({"features": {"text": {"dtype": "string", "_type": "Value"}}}))
    for f in files: w(f"{folder}/{f}")
# save_to_disk, datasets >= 2.8 (sharded) and older (one dataset.arrow)
state("std", ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"])
state("std_old", ["dataset.arrow"], _indices_data_files=None)
state("std_indices", ["dataset.arrow"], _indices_data_files=[{"filename": "indices.arrow"}])
w("std_escape/state.json", json.dumps({"_data_files": [{"filename": "../std/data-00000-of-00002.arrow"}]}))
w("std_missing/state.json", json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
w("std_badjson/state.json", '{"_data_files": [')
# DatasetDicts
for sp in ("train", "validation", "test"): state(f"dd/{sp}", [f"data-0000{i}-of-00002.arrow" for i in range(2)] if sp == "train" else ["data-00000-of-00001.arrow"])
w("dd/dataset_dict.json", json.dumps({"splits": ["train", "validation", "test"]}))
for sp in ("train", "test"): state(f"dd_test/{sp}", ["data-00000-of-00001.arrow"])
w("dd_test/dataset_dict.json", json.dumps({"splits": ["train", "test"]}))
state("dd_notrain/test", ["data-00000-of-00001.arrow"])
w("dd_notrain/dataset_dict.json", json.dumps({"splits": ["test"]}))
# the datasets cache: two builds of allenai/c4 "en" (the newer chosen), an unfinished third,
# .map() outputs beside the data
c4 = "datasets/allenai___c4/en/0.0.0"
for b in ("old0hash", "new1hash"):
    for f in ("c4-train-00000-of-00002.arrow", "c4-train-00001-of-00002.arrow", "c4-validation.arrow", "cache-1a2b3c.arrow", "cache-ffff.arrow"):
        w(f"{c4}/{b}/{f}")
    w(f"{c4}/{b}/dataset_info.json", "{}")
w(f"{c4}/zzz9hash.incomplete/c4-train.arrow")
os.utime(f"{h}/{c4}/old0hash", (time.time() - 3600, time.time() - 3600))
w("datasets/allenai___c4/realnewslike/0.0.0/abc/c4-train.arrow"); w("datasets/allenai___c4/realnewslike/0.0.0/abc/dataset_info.json", "{}")
w("datasets/roneneldan___tiny_stories/default/0.0.0/h1/tiny_stories-train.arrow")
w("datasets/roneneldan___tiny_stories/default/0.0.0/h1/tiny_stories-validation.arrow")
w("datasets/roneneldan___tiny_stories/default/0.0.0/h1/dataset_info.json", "{}")
# load_dataset("json", data_files=...) builds: config folders default-<hash of the arguments>
for c in ("default-0a1b2c3d", "default-9f8e7d6c", "en-5555aaaa"):
    w(f"datasets/json/{c}/0.0.0/h/json-train.arrow"); w(f"datasets/json/{c}/0.0.0/h/dataset_info.json", "{}")
# the hub cache: blobs, snapshots of relative symlinks, refs/main
def hub(repo, files, rev="0123456789abcdef", ref=True, dangling=()):
    base = f"hub/datasets--{repo.replace('/', '--')}"
    for i, f in enumerate(files):
        blob = f"{base}/blobs/{abs(hash((repo, f))):x}"
        w(blob, f"blob {f}")
        link = f"{h}/{base}/snapshots/{rev}/{f}"
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(f"{h}/{blob}", os.path.dirname(link)), link)
    for f in dangling:
        link = f"{h}/{base}/snapshots/{rev}/{f}"
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink("../../../blobs/0000missing", link)
    if ref: w(f"{base}/refs/main", rev)
c4files = [f"en/c4-train.{i:05d}-of-01024.json.gz" for i in range(3)] + ["en/c4-validation.00000-of-00008.json.gz", "README.md"]
hub("allenai/c4", ["en/c4-train.00000-of-01024.json.gz"], rev="aaaa1111old")
hub("allenai/c4", c4files, rev="bbbb2222new")
hub("org/pushed", ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet", "data/test-00000-of-00001.parquet", "README.md", ".gitattributes"])
hub("org/dataplus", ["data/train-00000-of-00001.parquet", "fr/train-00000-of-00001.parquet", "fr/validation-00000-of-00001.parquet"])
hub("org/configs", ["en/train-00000-of-00001.parquet", "en/validation-00000-of-00001.parquet", "fr/train-00000-of-00001.parquet"])
hub("org/conv", ["default/train/0000.parquet", "default/train/0001.parquet", "default/validation/0000.parquet", "other/train/0000.parquet"], rev="cafe0000")
hub("org/single", ["train.jsonl", "test.jsonl", "README.md", "load.py"])
hub("org/splitdirs", ["train/a.jsonl", "train/b.jsonl", "valid/a.jsonl"])
hub("org/broken", ["data/train-00000-of-00002.parquet"], dangling=["data/train-00001-of-00002.parquet"])
hub("org/tworevs", ["train.jsonl"], rev="r1", ref=False); hub("org/tworevs", ["train.jsonl"], rev="r2", ref=False)
hub("org/onerev", ["train.jsonl"], rev="r1", ref=False)
hub("legacyname", ["train.txt"])
# plain folders
for f in ("b.txt", "a.txt", ".hidden.txt", "x.tmp", "y.lock", "cache-12ab.arrow", "sub/c.txt"): w(f"plain/{f}", "text\n")
for f in ("train_000000.bin", "train_000001.bin", "val_000000.bin"): w(f"prepared/{f}", "x")
for f in ("training.txt", "notes.txt"): w(f"mixed/{f}", "x")
# hf download --local-dir: the repository's files, and its metadata in .cache/huggingface
for f in ("en/c4-train.00000-of-01024.json.gz", "en/c4-validation.00000-of-00008.json.gz", ".cache/huggingface/download/en/x.metadata", ".gitattributes"):
    w(f"localdir/{f}", "x")
PY
check "source_resolve fixtures: folders, a datasets cache and a hub cache of blobs and relative symlinks" $?

# resolve NAME SPEC CONFIG SPLIT FILE...: found, with exactly these files in this order
resolve() {
    local name=$1 spec=$2 cfg=$3 split=$4 out got
    shift 4
    out=$($T resolve "$spec" "$cfg" "$split")
    got=$(grep '^file=' <<<"$out" | cut -d= -f2-)
    [ "$(head -1 <<<"$out")" = "rc=1" ] && [ "$got" = "$(printf '%s\n' "$@")" ]
    check "resolve: $name" $? "($(tr '\n' '|' <<<"$out" | head -c 600))"
}
resolve_none() {  # NAME SPEC CONFIG SPLIT: "no such split here"
    local out
    out=$($T resolve "$2" "$3" "$4")
    [ "$out" = "rc=0" ]
    check "resolve: $1" $? "($(tr '\n' '|' <<<"$out" | head -c 300))"
}
resolve_err() {  # NAME SPEC CONFIG SPLIT REGEX: an error, one line matching REGEX
    local out
    out=$($T resolve "$2" "$3" "$4")
    [ "$(head -1 <<<"$out")" = "rc=-1" ] && [ "$(wc -l <<<"$out")" = 2 ] && grep -Eq -- "^err=$5" <<<"$out"
    check "resolve: $1" $? "($(tr '\n' '|' <<<"$out" | head -c 600))"
}
desc_is() {  # NAME SPEC CONFIG SPLIT DESC
    local out
    out=$($T resolve "$2" "$3" "$4")
    grep -qxF -- "desc=$5" <<<"$out"
    check "resolve: $1" $? "($(grep '^desc=' <<<"$out"))"
}

resolve "a file" "$S/text.txt" - train "$S/text.txt"
resolve_none "a file has no validation split" "$S/text.txt" - validation
resolve "a glob, sorted" "$H/plain/*.txt" - train "$H/plain/a.txt" "$H/plain/b.txt"
resolve_err "a glob matching nothing" "$H/plain/*.none" - train "no files match '$H/plain/\*\.none'$"
resolve "a plain folder: its files, sorted; hidden, *.tmp, *.lock, cache-*.arrow and folders left out" "$H/plain" - train \
    "$H/plain/a.txt" "$H/plain/b.txt"
resolve_none "a plain folder has no validation split" "$H/plain" - validation
resolve_err "a plain folder has no configs" "$H/plain" en train "folder '$H/plain' has no configs; config 'en' does not apply to it$"
resolve "a folder of train_*/val_* shards: train" "$H/prepared" - train "$H/prepared/train_000000.bin" "$H/prepared/train_000001.bin"
resolve "a folder of train_*/val_* shards: validation" "$H/prepared" - validation "$H/prepared/val_000000.bin"
resolve "a folder where not every name marks a split is all train" "$H/mixed" - train "$H/mixed/notes.txt" "$H/mixed/training.txt"
resolve_none "... and has no validation split" "$H/mixed" - validation
resolve_err "a missing path" "$H/nothing/train.bin" - train "'$H/nothing/train.bin' does not exist \(no such file or folder\)$"
resolve_err "a missing file name with a data extension is not looked up as a dataset" "train.bin" - train "'train.bin' does not exist"

resolve "save_to_disk folder (data-0000K-of-0000N.arrow)" "$H/std" - train "$H/std/data-00000-of-00002.arrow" "$H/std/data-00001-of-00002.arrow"
desc_is "save_to_disk folder description" "$H/std" - train "save_to_disk folder '$H/std' (2 shards) (2 files)"
resolve_none "a save_to_disk Dataset has no validation split" "$H/std" - validation
resolve "save_to_disk folder, older naming (dataset.arrow)" "$H/std_old" - train "$H/std_old/dataset.arrow"
resolve_err "save_to_disk folder with an indices mapping" "$H/std_indices" - train \
    "save_to_disk folder '$H/std_indices' holds an indices mapping .*flatten_indices\(\)"
resolve_err "state.json naming a file outside its folder" "$H/std_escape" - train "'$H/std_escape/state.json': _data_files\[0\] is not a file name in its folder$"
resolve_err "state.json naming a missing file" "$H/std_missing" - train "cannot read data file '$H/std_missing/data-00000-of-00001.arrow': No such file"
resolve_err "state.json that is not JSON" "$H/std_badjson" - train "save_to_disk folder '$H/std_badjson': '$H/std_badjson/state.json' is not valid JSON"
resolve "DatasetDict: train" "$H/dd" - train "$H/dd/train/data-00000-of-00002.arrow" "$H/dd/train/data-00001-of-00002.arrow"
resolve "DatasetDict: validation" "$H/dd" - validation "$H/dd/validation/data-00000-of-00001.arrow"
resolve "DatasetDict: test" "$H/dd" - test "$H/dd/test/data-00000-of-00001.arrow"
resolve "DatasetDict without validation: test stands in" "$H/dd_test" - validation "$H/dd_test/test/data-00000-of-00001.arrow"
desc_is "DatasetDict stand-in described" "$H/dd_test" - validation "DatasetDict folder '$H/dd_test' split test (for validation) (1 file)"
resolve_err "DatasetDict without train" "$H/dd_notrain" - train "DatasetDict folder '$H/dd_notrain' has no train split \(its splits: test\)$"

# names through the datasets cache alone (the hub cache, looked in first, also has allenai/c4)
N=$H/datasets/allenai___c4/en/0.0.0/new1hash
HF_HUB_CACHE=$W/nohub resolve "datasets cache by name: the newest build, cache-*.arrow skipped" allenai/c4 en train \
    "$N/c4-train-00000-of-00002.arrow" "$N/c4-train-00001-of-00002.arrow"
HF_HUB_CACHE=$W/nohub resolve "datasets cache by name: validation" allenai/c4 en validation "$N/c4-validation.arrow"
HF_HUB_CACHE=$W/nohub desc_is "datasets cache description names the rule" roneneldan/TinyStories - validation \
    "datasets cache roneneldan/TinyStories config default (build '$H/datasets/roneneldan___tiny_stories/default/0.0.0/h1') split validation (1 file)"
HF_HUB_CACHE=$W/nohub resolve "datasets cache, a CamelCase name (roneneldan/TinyStories -> roneneldan___tiny_stories)" roneneldan/TinyStories - train \
    "$H/datasets/roneneldan___tiny_stories/default/0.0.0/h1/tiny_stories-train.arrow"
HF_HUB_CACHE=$W/nohub resolve_err "datasets cache, several configs and none chosen" allenai/c4 - train \
    "datasets cache allenai/c4 has several configs in the datasets cache \(en, realnewslike\): choose one$"
resolve "datasets cache folder given as a path (NS___NAME)" "$H/datasets/allenai___c4" realnewslike train \
    "$H/datasets/allenai___c4/realnewslike/0.0.0/abc/c4-train.arrow"
resolve "datasets cache: config en is the only en-<hash> folder" "$H/datasets/json" en train "$H/datasets/json/en-5555aaaa/0.0.0/h/json-train.arrow"
resolve_err "datasets cache: two default-<hash> folders are not guessed between" "$H/datasets/json" - train \
    "datasets cache folder '$H/datasets/json' has several configs in the datasets cache \(default-0a1b2c3d, default-9f8e7d6c, en-5555aaaa\): choose one$"
resolve "datasets cache folder given as a path (a build)" "$N" - train "$N/c4-train-00000-of-00002.arrow" "$N/c4-train-00001-of-00002.arrow"
resolve "datasets cache folder given as a path (a version: the newest build)" "$H/datasets/allenai___c4/en/0.0.0" - validation "$N/c4-validation.arrow"
out=$(HF_HUB_CACHE=$W/nohub $T resolve allenai/c4 en train)
grep -q "^desc=datasets cache allenai/c4 config en (build '$N', the newest of 2 builds by modification time) split train (2 files)$" <<<"$out"
check "resolve: datasets cache description says which build and why" $? "($(grep desc <<<"$out"))"

# names through the hub cache
C=$H/hub/datasets--allenai--c4/snapshots/bbbb2222new
resolve "hub cache: short name c4 is allenai/c4, refs/main's snapshot, config folder en" c4 - train \
    "$C/en/c4-train.00000-of-01024.json.gz" "$C/en/c4-train.00001-of-01024.json.gz" "$C/en/c4-train.00002-of-01024.json.gz"
resolve "hub cache: c4 validation" allenai/c4 en validation "$C/en/c4-validation.00000-of-00008.json.gz"
desc_is "hub cache description" allenai/c4 en train "hub cache allenai/c4 revision bbbb222 config en split train (3 files)"
resolve_err "hub cache: a config the snapshot lacks" allenai/c4 realnewslike train \
    "hub cache allenai/c4 revision bbbb222 has no config 'realnewslike' \(its folders with data: en\)$"
[ "$(readlink "$C/en/c4-train.00000-of-01024.json.gz" | cut -c1-15)" = "../../../blobs/" ] && [ -f "$C/en/c4-train.00000-of-01024.json.gz" ]
check "hub cache fixture: snapshot files are relative symlinks into blobs/" $?
P=$H/hub/datasets--org--pushed/snapshots/0123456789abcdef
resolve "hub: data/train-0000K-of-0000N.parquet" org/pushed - train "$P/data/train-00000-of-00002.parquet" "$P/data/train-00001-of-00002.parquet"
resolve "hub: data/test-* stands in for validation" org/pushed - validation "$P/data/test-00000-of-00001.parquet"
desc_is "hub: data/ is the default config" org/pushed - train "hub cache org/pushed revision 0123456 config default split train (2 files)"
P=$H/hub/datasets--org--dataplus/snapshots/0123456789abcdef
resolve "hub: data/ beside another config's folder: data/ without a config" org/dataplus - train "$P/data/train-00000-of-00001.parquet"
resolve_none "hub: data/ beside another config's folder: no validation in data/" org/dataplus - validation
resolve "hub: data/ beside another config's folder: that config" org/dataplus fr validation "$P/fr/validation-00000-of-00001.parquet"
resolve "hub: data/ is config default" org/dataplus default train "$P/data/train-00000-of-00001.parquet"
P=$H/hub/datasets--org--configs/snapshots/0123456789abcdef
resolve "hub: CONFIG/SPLIT-0000K-of-0000N.parquet" org/configs en validation "$P/en/validation-00000-of-00001.parquet"
resolve_none "hub: CONFIG/SPLIT-* without the split" org/configs fr validation
resolve_err "hub: several configs and none chosen" org/configs - train "hub cache org/configs revision 0123456 holds several configs \(en, fr\): choose one$"
P=$H/hub/datasets--org--conv/snapshots/cafe0000
resolve "hub: the Parquet conversion CONFIG/SPLIT/NNNN.parquet, default config" org/conv - train "$P/default/train/0000.parquet" "$P/default/train/0001.parquet"
resolve "hub: the Parquet conversion, validation" org/conv default validation "$P/default/validation/0000.parquet"
resolve "hub: the Parquet conversion, another config" org/conv other train "$P/other/train/0000.parquet"
resolve_none "hub: the Parquet conversion, another config without validation" org/conv other validation
P=$H/hub/datasets--org--single/snapshots/0123456789abcdef
resolve "hub: single files train.jsonl / test.jsonl (README.md, load.py left out)" org/single - train "$P/train.jsonl"
resolve "hub: test.jsonl stands in for validation" org/single - validation "$P/test.jsonl"
P=$H/hub/datasets--org--splitdirs/snapshots/0123456789abcdef
resolve "hub: split folders train/ and valid/" org/splitdirs - train "$P/train/a.jsonl" "$P/train/b.jsonl"
resolve "hub: split folder valid/ is validation" org/splitdirs - validation "$P/valid/a.jsonl"
resolve "hub: a bare legacy name (datasets--legacyname)" legacyname - train "$H/hub/datasets--legacyname/snapshots/0123456789abcdef/train.txt"
resolve "hub: without refs/main, the only snapshot" org/onerev - train "$H/hub/datasets--org--onerev/snapshots/r1/train.jsonl"
resolve_err "hub: without refs/main, two snapshots" org/tworevs - train \
    "dataset 'org/tworevs' has 2 snapshots in $H/hub/datasets--org--tworevs/snapshots and no refs/main to choose one"
resolve_err "hub: a dangling symlink is named" org/broken - train \
    "'$H/hub/datasets--org--broken/snapshots/0123456789abcdef/data/train-00001-of-00002.parquet' is a dangling symlink \(to '../../../blobs/0000missing', which is missing"
resolve "a snapshot folder given as a path" "$H/hub/datasets--org--conv/snapshots/cafe0000" other train \
    "$H/hub/datasets--org--conv/snapshots/cafe0000/other/train/0000.parquet"
resolve "a hub cache repository folder given as a path: refs/main's snapshot" "$H/hub/datasets--allenai--c4" en validation \
    "$H/hub/datasets--allenai--c4/snapshots/bbbb2222new/en/c4-validation.00000-of-00008.json.gz"
resolve_err "a hub cache repository folder with two snapshots and no refs/main" "$H/hub/datasets--org--tworevs" - train \
    "hub cache folder '$H/hub/datasets--org--tworevs' has 2 snapshots in $H/hub/datasets--org--tworevs/snapshots and no refs/main"
mkdir -p "$H/codefolders/a" && touch "$H/codefolders/a/x.py"
resolve_err "a folder of folders without data files says which names count" "$H/codefolders" - train \
    "dataset folder '$H/codefolders' holds no data files \(\.parquet, \.arrow"
L=$H/localdir
resolve "an hf download --local-dir folder (.cache/huggingface skipped, config en inferred)" "$L" - train "$L/en/c4-train.00000-of-01024.json.gz"
resolve "an hf download --local-dir folder: validation" "$L" - validation "$L/en/c4-validation.00000-of-00008.json.gz"

resolve_err "a name in no cache: every place looked, and how to fetch it" nobody/nothing - train \
    "'nobody/nothing' is not a file or folder, and no Hugging Face cache here holds dataset nobody/nothing \(fsdpc never downloads; looked in $H/hub/datasets--nobody--nothing, $H/datasets/nobody___nothing\); where there is internet, run: hf download nobody/nothing --repo-type dataset --local-dir DIR, then pass DIR"
HF_HUB_CACHE= HF_DATASETS_CACHE= HF_HOME=$W/home resolve_err "c4 in no cache: HF_HOME's places and the C4 download line" c4 - train \
    "'c4' is not a file or folder, and no Hugging Face cache here holds dataset allenai/c4 \(fsdpc never downloads; looked in $W/home/hub/datasets--allenai--c4, $W/home/hub/datasets--c4, $W/home/datasets/allenai___c4, $W/home/datasets/c4\); where there is internet, run: hf download allenai/c4 --repo-type dataset --include 'en/c4-train.0000\*-of-01024.json.gz' --include 'en/c4-validation.00000-of-00008.json.gz' --local-dir DIR"
mkdir -p "$W/xdg/huggingface"
cp -r "$H/hub" "$W/xdg/huggingface/hub"
HF_HUB_CACHE= HF_DATASETS_CACHE= XDG_CACHE_HOME=$W/xdg resolve "the hub cache under XDG_CACHE_HOME/huggingface" org/single - train \
    "$W/xdg/huggingface/hub/datasets--org--single/snapshots/0123456789abcdef/train.jsonl"
HF_HUB_CACHE= HF_DATASETS_CACHE= HOME=$W/xdg/.. XDG_CACHE_HOME= resolve_err "the default cache under HOME" org/single - train \
    "'org/single' is not a file or folder, and no Hugging Face cache here holds dataset org/single \(fsdpc never downloads; looked in $W/xdg/../.cache/huggingface/hub/datasets--org--single"
