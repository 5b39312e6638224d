"""Damage fsdpc checkpoints the way disks, copies and hand edits do, for test/integration/test_ckpt.sh.

  flip SRC OUTDIR N       N copies of SRC with one byte of tensor data flipped each (seed = copy
                          number, groups in turn); prints "<copy> <group/tensor>" per copy
  flip1 FILE SEED         flips one byte of one tensor's data in place; prints the tensor
  attr FILE NAME KIND [V] root attribute NAME becomes V as KIND (int, str, float, intarray) or
                          is deleted (KIND delete)
  dims32 FILE TENSOR      TENSOR becomes a 32-dimensional dataset
  v1 FILE                 FILE becomes a format_version 1 file (no run ids, no checksums)
  crcs FILE...            exits 0 when every dataset's crc32 attribute is zlib's CRC-32 of its
                          little-endian fp32 data
  nan FILE VALUE TENSOR...  element 0 of each TENSOR (group/name) becomes VALUE (nan, inf), its
                          crc32 attribute rewritten to match: a file a diverged run could have saved
"""
import random
import shutil
import sys
import zlib

import h5py
import numpy as np

GROUPS = ["model", "optim/exp_avg", "optim/exp_avg_sq"]


def tensors(path):
    """{group: [(name, byte offset, byte count)]} of the contiguous datasets in the file."""
    out = {g: [] for g in GROUPS}
    with h5py.File(path, "r") as f:
        for g in GROUPS:
            for name, ds in f[g].items():
                out[g].append((f"{g}/{name}", ds.id.get_offset(), ds.id.get_storage_size()))
    return out


def flip_one(path, seed):
    rng = random.Random(seed)
    group = tensors(path)[GROUPS[seed % len(GROUPS)]]
    name, off, size = group[rng.randrange(len(group))]
    pos = off + rng.randrange(size)
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ rng.randrange(1, 256)]))
    return name


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "flip":
        src, outdir, n = args[0], args[1], int(args[2])
        for seed in range(n):
            copy = f"{outdir}/flip{seed:02d}.h5"
            shutil.copyfile(src, copy)
            print(copy, flip_one(copy, seed))
    elif cmd == "flip1":
        print(flip_one(args[0], int(args[1])))
    elif cmd == "attr":
        path, name, kind = args[:3]
        with h5py.File(path, "r+") as f:
            if kind == "delete":
                del f.attrs[name]
            elif kind == "int":
                f.attrs[name] = np.int64(args[3])
            elif kind == "float":
                f.attrs[name] = np.float64(args[3])
            elif kind == "intarray":
                f.attrs[name] = np.array([int(x) for x in args[3].split(",")], dtype=np.int32)
            else:
                f.attrs[name] = args[3]  # h5py stores a variable-length string
    elif cmd == "dims32":
        path, name = args
        with h5py.File(path, "r+") as f:
            del f[name]
            f.create_dataset(name, shape=(1,) * 32, dtype="<f4")
    elif cmd == "v1":
        with h5py.File(args[0], "r+") as f:
            for a in ["run_id", "parent", "lineage", "checksum"]:
                del f.attrs[a]
            f.attrs["format_version"] = np.int32(1)
            for g in GROUPS:
                for ds in f[g].values():
                    del ds.attrs["crc32"]
    elif cmd == "nan":
        path, value, names = args[0], float(args[1]), args[2:]
        with h5py.File(path, "r+") as f:
            for name in names:
                ds = f[name]
                data = np.ascontiguousarray(ds[()], dtype="<f4")
                data.reshape(-1)[0] = value
                ds[...] = data
                ds.attrs["crc32"] = ds.attrs["crc32"].dtype.type(zlib.crc32(data.tobytes()))
    elif cmd == "crcs":
        bad = []
        for path in args:
            with h5py.File(path, "r") as f:
                for g in GROUPS:
                    for name, ds in f[g].items():
                        data = np.ascontiguousarray(ds[()], dtype="<f4").tobytes()
                        if int(ds.attrs["crc32"]) != zlib.crc32(data):
                            bad.append(f"{path}:{g}/{name}")
        print(" ".join(bad[:5]))
        sys.exit(1 if bad else 0)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
