#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (checked in; rerun after a format change).

Each corpus holds a few valid inputs and near-misses that each break one rule, so the fuzzer
starts next to every check instead of having to find the format from nothing. The wire headers
follow the table in common/wire_format.h byte for byte; fuzz_wire_format re-encodes every header
it accepts and requires the same bytes back, so running it over this corpus checks them against
the real encoder. Output is deterministic (gzip mtime 0), so a rerun changes nothing."""
import gzip
import os
import shutil
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# ---- wire_format: the 48-byte parameter-server header ----------------------------------------
MAGIC, VERSION = 0x53505347, 4
HELLO, HELLO_ACK, PUSHPULL, PULL, REPLY, ERROR, HEARTBEAT, BYE, INIT = range(1, 10)


def header(type_, sender=0, aux=0, step=0, begin=0, end=0, payload=0, magic=MAGIC,
           version=VERSION):
    return struct.pack("<IHHIIQQQQ", magic, version, type_, sender, aux, step, begin, end, payload)


def wire_seeds():
    return {
        # Valid: one of each type, with the payload rule of its type.
        "hello": header(HELLO, sender=1, aux=4, end=101770),
        "hello_ack": header(HELLO_ACK, sender=0, step=7, begin=0, end=50885),
        "pushpull": header(PUSHPULL, sender=3, step=12, begin=0, end=1024, payload=4096),
        "pull": header(PULL, sender=2, step=5, begin=1024, end=2048),
        "reply": header(REPLY, sender=1, aux=2, step=13, begin=1024, end=2048, payload=4096),
        "error": header(ERROR, sender=0, payload=37),
        "heartbeat": header(HEARTBEAT, sender=5),
        "bye": header(BYE, sender=5, step=300),
        "init": header(INIT, sender=0, begin=256, end=512, payload=1024),
        # Encoded pushes (aux: 1 fp16, 2 bf16, 3 topk).
        "pushpull_fp16": header(PUSHPULL, sender=3, aux=1, step=12, end=1024, payload=2048),
        "pushpull_bf16": header(PUSHPULL, sender=3, aux=2, step=12, end=1024, payload=2048),
        "pushpull_topk": header(PUSHPULL, sender=3, aux=3, step=12, end=1024, payload=80),
        # Near-misses: each breaks exactly one rule.
        "bad_magic": header(PULL, magic=0x53505348),
        "bad_version": header(PULL, version=1),
        "type_zero": header(0),
        "type_past_last": header(INIT + 1),
        "range_reversed": header(PULL, begin=10, end=9),
        "payload_over_max": header(PUSHPULL, begin=0, end=(1 << 31) + 1, payload=(1 << 33) + 4),
        "payload_mismatch": header(PUSHPULL, begin=0, end=1024, payload=4092),
        "payload_wraps": header(PUSHPULL, begin=0, end=1 << 62, payload=0),
        "push_encoding_unknown": header(PUSHPULL, aux=4, begin=0, end=1024, payload=4096),
        "push_fp16_as_fp32": header(PUSHPULL, aux=1, begin=0, end=1024, payload=4096),
        "push_topk_too_many": header(PUSHPULL, aux=3, begin=0, end=1024, payload=8200),
        "push_topk_empty": header(PUSHPULL, aux=3, begin=0, end=1024, payload=0),
        "error_empty": header(ERROR, payload=0),
        "error_too_long": header(ERROR, payload=4097),
        "hello_with_payload": header(HELLO, payload=4),
        "short_frame": header(PULL)[:47],
        "long_frame": header(PULL) + b"\0",
    }


# ---- idx_reader: IDX files, gzip or raw ------------------------------------------------------
def idx(type_byte, shape, data):
    out = bytes([0, 0, type_byte, len(shape)])
    for d in shape:
        out += struct.pack(">I", d)
    return out + bytes(data)


def gz(raw):
    return gzip.compress(raw, compresslevel=9, mtime=0)


def idx_seeds():
    images = idx(0x08, [2, 3, 3], range(0, 18 * 14, 14))
    labels = idx(0x08, [2], [3, 7])
    return {
        "images_gz": gz(images),
        "labels_gz": gz(labels),
        "labels_raw": labels,  # not gzip: zlib reads it through unchanged
        "scalar_gz": gz(idx(0x08, [], [42])),
        "empty_gz": gz(idx(0x08, [0, 28, 28], [])),
        "truncated_data_gz": gz(images[:-5]),
        "extra_data_gz": gz(labels + b"\x09"),
        "truncated_gzip": gz(labels)[:-6],  # trailer cut: data complete, CRC unverifiable
        "corrupt_gzip": gz(labels)[:12] + b"\xff\xff" + gz(labels)[14:],
        "float_type_gz": gz(idx(0x0D, [1], [0, 0, 0, 0])),
        "bad_magic_gz": gz(b"\x01\x00\x08\x01" + labels[4:]),
        "huge_shape_gz": gz(idx(0x08, [0xFFFFFFFF, 0xFFFFFFFF], [])),
        "claims_more_gz": gz(idx(0x08, [1 << 20], [1, 2, 3])),
        "empty_file": b"",
    }


# ---- preset: YAML presets, then NUL-separated --set overrides ---------------------------------
def preset_seeds():
    seeds = {}
    # The shipped presets, trimmed to their keys (comments dropped, runs kept).
    seeds["quickstart"] = b"""strategy: single
workers: 1
data:
  kind: fashion-mnist
model:
  hidden: [256, 256]
train:
  epochs: 12
  batch: 256
  lr: 0.1
  momentum: 0.9
  weight_decay: 0.0001
  seed: 1
  target_accuracy: 0.88
runs:
  - name: single
  - name: dp-4
    strategy: dp
    workers: 4
    train: {batch: 64}
  - name: allreduce-4
    strategy: allreduce
    workers: 4
    train: {batch: 64}
"""
    seeds["ddp_overlap"] = b"""strategy: allreduce
workers: 2
data: {kind: synthetic, train_samples: 512, test_samples: 128, dim: 16, classes: 4}
model: {hidden: [2048, 2048, 2048]}
train: {steps: 100, batch: 64, lr: 0.02, momentum: 0.9, eval_every: 1000, target_accuracy: 0.7}
output: {trace_steps: 100}
runs:
  - name: overlap-25mb
    comm: {overlap: true, bucket_mb: 25}
  - name: after-backward
    comm: {overlap: false, bucket_mb: 100000}
"""
    seeds["ps_vs_allreduce"] = b"""strategy: ps
workers: 2
data: {kind: synthetic}
model: {hidden: [1024, 1024]}
train: {steps: 300, batch: 64, lr: 0.05, momentum: 0.9, eval_every: 100000}
runs:
  - {name: allreduce-2, strategy: allreduce, workers: 2}
  - {name: ps-2-k1, workers: 2, ps: {servers: 1, mode: sync}}
  - {name: ps-4-k2, workers: 4, train: {batch: 32}, ps: {servers: 2, mode: ssp, staleness: 2}}
"""
    seeds["every_section"] = b"""strategy: ps
workers: 3
data: {kind: idx, dir: /tmp}
model: {kind: synthetic, parameters: 1000, compute_ms: 2.5, layers: 4}
train: {steps: 0, epochs: 2, accumulation_steps: 2, seed: -7}
comm: {timeout_s: 20, bucket_mb: 0.01, overlap: false, uneven_inputs: true}
ps: {servers: 2, mode: async, continue_without_dead_workers: true, bind: 127.0.0.1,
     curve_keys: "", heartbeat_s: 0.5}
network: {link_gbps: 10}
sweep: {workers: [1, 2, 4]}
output: {dir: results, trace_steps: 0, progress: off}
"""
    seeds["with_overrides"] = (b"strategy: dp\nworkers: 2\ndata: {kind: synthetic}\n"
                               b"\0train.lr=0.5\0model.hidden=64, 64\0output.dir=\"a b\"")
    seeds["overrides_only"] = b"\0strategy=single\0data.kind=synthetic"
    seeds["empty"] = b""
    # Near-misses.
    seeds["unknown_key"] = b"data: {kind: synthetic}\ntrain: {stpes: 10}\n"
    seeds["wrong_type"] = b"data: {kind: synthetic}\nworkers: two\n"
    seeds["out_of_range"] = b"data: {kind: synthetic}\ntrain: {momentum: 1}\n"
    seeds["duplicate_run"] = b"data: {kind: synthetic}\nruns:\n  - {name: a}\n  - {name: a}\n"
    seeds["bad_name"] = b"data: {kind: synthetic}\nruns: [{name: ../up}]\n"
    seeds["run_only_at_top"] = b"name: x\n"
    seeds["runs_empty"] = b"runs: []\n"
    seeds["not_a_map"] = b"- just\n- a list\n"
    seeds["invalid_yaml"] = b"train: {lr: [0.1}\n"
    seeds["anchors"] = b"data: &d {kind: synthetic}\nruns:\n  - {name: a, data: *d}\n"
    seeds["bad_override"] = b"data: {kind: synthetic}\n\0train.lr\0nope.key=1"
    return seeds


# ---- checkpoint: parts as common/checkpoint_file.h lays them out -----------------------------
def ckpt(step=50, total=6, begin=0, end=6, opt=50, description=b"mlp 2-2", version=1,
         magic=b"gradsync-ckpt\0\0\0", crc_fix=True):
    n = end - begin
    body = (magic + struct.pack("<II", version, len(description)) +
            struct.pack("<5Q", step, total, begin, end, opt) + description +
            struct.pack(f"<{n}f", *[0.25 * i for i in range(n)]) +
            struct.pack(f"<{n}f", *[-0.5 * i for i in range(n)]))
    crc = zlib.crc32(body) if crc_fix else 0
    return body + struct.pack("<I", crc)


def checkpoint_seeds():
    whole = ckpt()
    return {
        # Valid: a whole model, a middle part, an empty range.
        "whole": whole,
        "part": ckpt(total=100, begin=40, end=44, description=b"synthetic 100 in 4 layers"),
        "empty_range": ckpt(total=10, begin=10, end=10),
        # Near-misses: each breaks one rule.
        "truncated": whole[:-7],
        "header_only": whole[:70],
        "trailing": whole + b"\0",
        "bad_crc": ckpt(crc_fix=False),
        "bad_magic": ckpt(magic=b"gradsync-ckpx\0\0\0"),
        "version_2": ckpt(version=2),
        "range_past_total": ckpt(total=4, begin=0, end=6),
        "long_description": ckpt(description=b"x" * 5000),
    }


def write(name, seeds):
    folder = os.path.join(CORPUS, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for file, data in seeds.items():
        with open(os.path.join(folder, file), "wb") as out:
            out.write(data)


def main():
    write("wire_format", wire_seeds())
    write("idx_reader", idx_seeds())
    write("preset", preset_seeds())
    write("checkpoint", checkpoint_seeds())
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(CORPUS) for f in fs)
    print(f"make_seeds: wrote {CORPUS} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
