#!/usr/bin/python3
"""Reads --tensorboard_dir event files as TensorBoard does, with protobuf's own decoder (Debian's
python3-protobuf), and holds them against --metrics_file lines.

Usage: tboard_read.py DIR METRICS...
Every events file in DIR must be one run's: exactly one file per metrics file, whose train/loss
steps are that file's steps. Each TFRecord's length and data CRC-32C are checked, the first event
must be the file_version record, and every scalar of the metrics lines (loss, lr, grad_norm,
tokens, tokens_per_s, mem_mib, mfu, val_loss) must be in the events at its step, to float
precision. Prints one summary line; exits 1 with the reason on the first mismatch."""
import json, os, re, struct, sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

POLY = 0x82F63B78  # CRC-32C, reflected
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ (POLY if c & 1 else 0)
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    """tensorflow.Event with the fields fsdpc writes, numbered as in TensorFlow's event.proto and
    summary.proto, built at run time (no protoc)"""
    f = descriptor_pb2.FileDescriptorProto(name="tb_event.proto", package="tensorflow", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    def msg(name, fields, oneof=None, parent=None):
        """fields: (name, number, type, label, type_name, in the oneof)"""
        m = (parent.nested_type if parent else f.message_type).add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, num, typ, label, type_name, in_oneof in fields:
            fd = m.field.add(name=fname, number=num, type=typ, label=label)
            if type_name:
                fd.type_name = type_name
            if in_oneof:
                fd.oneof_index = 0
        return m
    OPT, REP = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    summary = msg("Summary", [("value", 1, T.TYPE_MESSAGE, REP, ".tensorflow.Summary.Value", False)])
    # as in summary.proto, simple_value is a member of the oneof `value`: a 0.0 is written, not left out
    msg("Value", [("tag", 1, T.TYPE_STRING, OPT, "", False), ("simple_value", 2, T.TYPE_FLOAT, OPT, "", True)], "value", summary)
    msg("Event", [("wall_time", 1, T.TYPE_DOUBLE, OPT, "", False), ("step", 2, T.TYPE_INT64, OPT, "", False),
                  ("file_version", 3, T.TYPE_STRING, OPT, "", True), ("summary", 5, T.TYPE_MESSAGE, OPT, ".tensorflow.Summary", True)],
        "what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    get = getattr(message_factory, "GetMessageClass", None)
    return get(desc) if get else message_factory.MessageFactory(pool).GetPrototype(desc)


Event = event_class()


def records(path):
    data = open(path, "rb").read()
    at, out = 0, []
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"{path}: {len(data) - at} stray bytes at offset {at}")
        head = data[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[at + 8:at + 12])
        if hcrc != masked(head):
            raise ValueError(f"{path}: record at offset {at}: length CRC {hcrc:#x}, expected {masked(head):#x}")
        if at + 12 + n + 4 > len(data):
            raise ValueError(f"{path}: record at offset {at} runs past the end")
        body = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack("<I", data[at + 12 + n:at + 16 + n])
        if dcrc != masked(body):
            raise ValueError(f"{path}: record at offset {at}: data CRC {dcrc:#x}, expected {masked(body):#x}")
        ev = Event()
        ev.ParseFromString(body)
        if ev.SerializeToString() != body:  # nothing fsdpc wrote was left unread (unknown fields re-serialize too)
            raise ValueError(f"{path}: record at offset {at} holds fields outside Event")
        out.append(ev)
        at += 16 + n
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def scalars(events):
    """{tag: {step: value}}"""
    got = {}
    for ev in events[1:]:
        if ev.file_version or len(ev.summary.value) != 1:
            raise ValueError(f"event at step {ev.step} is not one scalar")
        v = ev.summary.value[0]
        if ev.step in got.setdefault(v.tag, {}):
            raise ValueError(f"{v.tag} twice at step {ev.step}")
        got[v.tag][ev.step] = v.simple_value
    return got


def main():
    assert crc32c(b"123456789") == 0xE3069283, "the test's own CRC-32C is wrong"
    folder, metrics = sys.argv[1], sys.argv[2:]
    names = sorted(os.listdir(folder))
    for name in names:
        if not re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[A-Za-z0-9._-]+\.\d+\.\d+", name):
            raise ValueError(f"{name}: not TensorBoard's events file name")
    if len(names) != len(metrics):
        raise ValueError(f"{len(names)} events files for {len(metrics)} runs: {names}")
    files = {}
    for name in names:
        events = records(os.path.join(folder, name))
        first = events[0] if events else None
        if not first or first.file_version != "brain.Event:2" or first.wall_time < 1e9 or first.HasField("summary"):
            raise ValueError(f"{name}: the first event is not the file_version record")
        walls = [ev.wall_time for ev in events]
        if walls != sorted(walls):
            raise ValueError(f"{name}: wall times go backwards")
        files[name] = (events, scalars(events))
    fields = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm", "tokens": "train/tokens",
              "tokens_per_s": "perf/tokens_per_s", "mem_mib": "mem/peak_mib", "mfu": "perf/mfu", "val_loss": "val/loss"}
    total, summary = 0, []
    for mpath in metrics:
        lines = [json.loads(l) for l in open(mpath) if l.strip()]
        steps = {l["step"] for l in lines if l.get("loss") is not None}
        match = [n for n, (_, s) in files.items() if set(s.get("train/loss", {})) == steps]
        if len(match) != 1:
            raise ValueError(f"{mpath}: {len(match)} events files hold train/loss at its steps {sorted(steps)}")
        events, got = files.pop(match[0])
        want = 0
        for l in lines:
            for key, tag in fields.items():
                if l.get(key) is None:
                    continue
                want += 1
                v = got.get(tag, {}).get(l["step"])
                # the metrics line prints 9 digits (6 for tokens_per_s, 4 for mfu: half a unit of the
                # last) and mem_mib in whole MiB; the event holds a float32
                tol = 0.5001 if key == "mem_mib" else {"tokens_per_s": 6e-6, "mfu": 6e-4}.get(key, 1.2e-7) * abs(l[key])
                if v is None or abs(v - f32(l[key])) > tol:
                    raise ValueError(f"{match[0]}: {tag} at step {l['step']} is {v}, the metrics file says {l[key]}")
        have = sum(len(s) for s in got.values())
        if have != want:
            raise ValueError(f"{match[0]}: {have} scalars, the metrics file has {want}")
        total += len(events)
        summary.append(f"{match[0]}: steps {min(steps)}..{max(steps)}, {len(events)} records, tags {' '.join(sorted(got))}")
    print(f"{total} records, every CRC right; " + "; ".join(summary))


if __name__ == "__main__":
    try:
        main()
    except (ValueError, AssertionError, OSError) as e:
        print(f"tboard_read: {e}")
        sys.exit(1)
