"""Writes the committed seed corpora, tests/fuzz/corpus/<target>/ (run from
the repository root: /usr/bin/python3 tests/fuzz/make_seeds.py). Each seed
follows the input layout its target's comment describes; the fuzzer finds
the rest. The small models here match tests/fuzz/fuzz.h's where noted."""
import json
import pathlib
import random
import struct

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent / "corpus"
R = random.Random(7)


def config(arch="decoder", vocab=259, d=8, layers=1, heads=2, ff=16, norm="pre",
           act="gelu", tie=True, clip=2, values=True, per_head=False,
           bos=256, eos=257, pad=258):
    # Key order and spelling as fuzz.h's fuzz_config_json.
    return {"arch": arch, "vocab_size": vocab, "d_model": d, "n_layers": layers,
            "n_heads": heads, "d_ff": ff, "norm": norm, "norm_eps": 1e-5,
            "activation": act, "tie_embeddings": tie,
            "position": {"type": "shaw", "clip": clip, "values": values,
                         "per_head": per_head},
            "tokenizer": {"type": "bytes", "bos": bos, "eos": eos, "pad": pad}}


def tensors(c):
    d, rows, dh = c["d_model"], 2 * c["position"]["clip"] + 1, c["d_model"] // c["n_heads"]
    rel = [c["n_heads"], rows, dh] if c["position"]["per_head"] else [rows, dh]
    t = [("tok_emb", [c["vocab_size"], d])]
    for i in range(c["n_layers"]):
        p = f"layers.{i}."
        t += [(p + "ln1.weight", [d]), (p + "ln1.bias", [d])]
        for w in "qkvo":
            t += [(p + f"attn.w{w}", [d, d]), (p + f"attn.b{w}", [d])]
        t += [(p + "attn.rel_k", rel)]
        if c["position"]["values"]:
            t += [(p + "attn.rel_v", rel)]
        t += [(p + "ln2.weight", [d]), (p + "ln2.bias", [d]),
              (p + "ffn.w1", [c["d_ff"], d]), (p + "ffn.b1", [c["d_ff"]]),
              (p + "ffn.w2", [d, c["d_ff"]]), (p + "ffn.b2", [d])]
    if c["norm"] == "pre":
        t += [("ln_f.weight", [d]), ("ln_f.bias", [d])]
    if not c["tie_embeddings"]:
        t += [("lm_head", [c["vocab_size"], d])]
    return t


def safetensors(c, dtype="F32", meta=True):
    rng = np.random.default_rng(1)
    header, data = {}, b""
    if meta:
        header["__metadata__"] = {"relattn.config": json.dumps(c)}
    for name, shape in tensors(c):
        a = rng.uniform(-0.5, 0.5, int(np.prod(shape)))
        if dtype == "F32":
            raw = a.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = a.astype("<f2").tobytes()
        else:  # BF16: the top half of float32
            raw = (a.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return h, data


def write(target, name, blob):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(blob)


# safetensors: byte 0 bit 0 = whole file; else u16 header length, header, data.
small = config(vocab=256, d=2, heads=1, ff=2, clip=1, bos=None, eos=None, pad=None)
for dtype in ("F32", "F16", "BF16"):
    h, data = safetensors(small, dtype)
    write("safetensors", f"whole_{dtype}", bytes([1]) + struct.pack("<Q", len(h)) + h + data)
    write("safetensors", f"split_{dtype}", bytes([0]) + struct.pack("<H", len(h)) + h + data)
h, data = safetensors(config(), "F16", meta=False)  # fuzz.h's tiny, config as argument
write("safetensors", "tiny_config_arg", bytes([2]) + struct.pack("<H", len(h)) + h + data)
h, data = safetensors(config(vocab=256, d=2, heads=2, ff=1, clip=0, per_head=True,
                             values=False, norm="post", arch="encoder", tie=False,
                             bos=None, eos=None, pad=None), "F32")
write("safetensors", "post_per_head", bytes([0]) + struct.pack("<H", len(h)) + h + data)
write("safetensors", "empty", bytes([1]) + struct.pack("<Q", 2) + b"{}")
write("safetensors", "bad_len", bytes([1]) + struct.pack("<Q", 1 << 62) + b"{}")

# config: byte 0 bit 0 = UPDATE the stored config, else import with it.
tiny = config()
variants = [tiny, config(norm="post"), config(act="relu"), config(tie=False),
            config(per_head=True), config(values=False), config(arch="encoder"),
            config(bos=None, eos=None, pad=None), config(clip=0), config(layers=0),
            config(d=10 ** 9), config(layers=2 ** 31 - 1), config(vocab=-1)]
# the heads' keys: a bare encoder (the tensors fit), and heads whose tensors
# the file lacks or whose keys are wrong
variants += [dict(config(arch="encoder"), head="none"),
             dict(config(arch="encoder"), head="classifier", labels=["a", "b"],
                  problem_type="multi_label_classification", pooler={"activation": "tanh"}),
             dict(config(arch="encoder", pad=None), head="mlm", head_activation="gelu_tanh"),
             dict(config(), labels=[1, "b"], pooler="tanh")]
# d_head: today's width given (the tensors fit), another width (they do
# not), and 0
variants += [dict(config(), d_head=4), dict(config(), d_head=3), dict(config(), d_head=0)]
# sentence: a model's sentence-transformers modules (no tensor; with Dense
# modules the tensors are missing), and a malformed one
variants += [dict(config(arch="encoder"), sentence={"pooling": ["mean", "max"], "normalize": True,
                                                    "max_seq_length": 4}),
             dict(config(), sentence={"pooling": ["lasttoken"], "dense": [
                 {"in_features": 8, "out_features": 3, "bias": True, "activation": "tanh"}]}),
             dict(config(), sentence={"pooling": [], "dense": {}})]
for i, c in enumerate(variants):
    write("config", f"import_{i}", bytes([0]) + json.dumps(c).encode())
    write("config", f"update_{i}", bytes([1]) + json.dumps(c).encode())

# tokens: byte 0 picks the SQL (mod 10), bit 4 binds the rest as a BLOB.
ids = struct.pack("<5i", 1, 2, 3, 258, 0)
for op, arg in [(0, b"[1,2,3]"), (0, b"[]"), (0, b"[1.5, -1, 1e12, \"x\"]"), (1, ids),
                (2, b"[0, 2147483647, -2147483648]"), (3, "héllo\n".encode()),
                (4, ids), (5, struct.pack("<3i", 0, 255, 259)), (6, b"[4,5,6]"),
                (6 | 16, ids), (7, b"[1,2,300]"), (8, b"abc"), (8 | 16, ids),
                (9, b"[7,8,9]"), (1, b"\x01\x02\x03")]:
    write("tokens", f"op{op}_{len(arg)}_{arg[:4].hex()}", bytes([op]) + arg)

# attention: byte 0 bit 0 = raw; structured: H, d, n, clip, flags, spoil, values.
for i, (H, d, n, clip, flags, spoil) in enumerate(
        [(1, 4, 5, 1, 0xC, 0), (2, 3, 12, 3, 0xF, 0), (4, 8, 9, 0, 0x5, 0),
         (1, 1, 1, 2, 0x8, 0), (2, 2, 0, 1, 0xC, 0), (3, 5, 7, 2, 0xE, 1 | 8),
         (2, 4, 6, 1, 0xC, 2), (2, 2, 4, 1, 0x0, 3), (2, 2, 4, 1, 0x4, 4),
         # flag bit 7: n = 13 + 1.5 n, clip = (spoil >> 1) % 71, values generated
         (2, 8, 200, 0, 0x8D, 2 * 40), (1, 4, 100, 0, 0x8C, 2 * 3)]):
    if flags & 0x80:  # the harness generates the values past the input's end
        vals = bytes(random.Random(i).randrange(256) for _ in range(64))
    else:
        vals = bytes(R.randrange(256) for _ in range(3 * n * H * d + 2 * H * (2 * clip + 1) * d + 2))
    write("attention", f"structured_{i}",
          bytes([0, H - 1, d - 1, n, clip, flags, spoil]) + vals)


def raw_arg(kind, payload):
    return bytes([kind]) + struct.pack("<H", len(payload)) + payload


q = np.arange(8, dtype="<f4").tobytes()
write("attention", "raw_blobs", bytes([1]) + raw_arg(1, q) + raw_arg(1, q) + raw_arg(1, q)
      + raw_arg(0, b"") + raw_arg(0, b"") + raw_arg(2, b'{"heads":2,"d_head":2}'))
write("attention", "raw_json", bytes([1]) + raw_arg(2, b"[[1,0],[0,1]]") + raw_arg(2, b"[[1,2],[3,4]]")
      + raw_arg(2, b"[1,2,3,4]") + raw_arg(2, b"[[0.5,0.5],[1,1],[0,0]]") + raw_arg(0, b"")
      + raw_arg(2, b'{"heads":1,"d_head":2,"causal":true}'))
# position schemes: byte 6 after options is the count of tables that follow
m = b"[[1,0],[0,1],[1,1]]"
for name, opts, extra in [
        ("t5", b'{"heads":1,"d_head":2,"position":{"type":"t5","num_buckets":4,"max_distance":8}}',
         [b"[[0,1,0.5,0]]"]),
        ("alibi", b'{"heads":1,"d_head":2,"causal":true,"position":{"type":"alibi"}}', []),
        ("rope", b'{"heads":1,"d_head":2,"position":{"type":"rope","rotary":"interleaved"}}', []),
        ("xl", b'{"heads":1,"d_head":2,"causal":true,"position":{"type":"xl"}}',
         [b"[1,2]", b"[0.5,-1]"]),
        ("deberta", b'{"heads":1,"d_head":2,"position":{"type":"deberta","position_buckets":4,'
                    b'"max_relative_positions":6}}', [b"[" + b",".join([b"0.25"] * 16) + b"]"])]:
    rk = (b"[[0,1],[1,0],[0.5,0.5],[1,1],[2,0]]" if name == "xl" else
          b"[" + b",".join([b"0.5"] * 16) + b"]" if name == "deberta" else b"")
    write("attention", f"raw_{name}", bytes([1]) + raw_arg(2, m) + raw_arg(2, m) + raw_arg(2, m)
          + raw_arg(2 if rk else 0, rk) + raw_arg(0, b"") + raw_arg(2, opts)
          + bytes([len(extra)]) + b"".join(raw_arg(2, x) for x in extra))

# sql: a program of steps; random starts, and calls with a model and tokens.
for i in range(24):
    prog = bytes([0])
    for _ in range(3):
        # op (call), function index, then args: model 'tiny'/'enc', valid tokens.
        prog += bytes([R.randrange(6), i, 5 + (i % 2), 7, 6]) + bytes(R.randrange(200) for _ in range(6))
    write("sql", f"calls_{i}", prog)
for i in range(8):
    write("sql", f"module_{i}", bytes([0, 6, i, 5, 7, 4, 1, 2, 3, 4, 0]))
    write("sql", f"random_{i}", bytes(R.randrange(256) for _ in range(64)))

# config, mode 2: a model of odd shape made by the harness; flags, ids, then
# heads, d_model/heads, vocab-256, layers, d_ff, clip, d_head (0: absent),
# sequence length, ids. (shaped_0 .. 11 were written before the d_head byte:
# their clip byte is followed by what is now d_head.)
for i in range(12):
    flags, ids = R.randrange(256), R.randrange(8)
    shape = [R.randrange(4), R.randrange(6), R.randrange(8), R.randrange(3),
             R.randrange(12), R.randrange(7), R.randrange(48)]
    write("config", f"shaped_{i}", bytes([2, flags, ids] + shape)
          + bytes(R.randrange(256) for _ in range(48)))

# svg: byte 0 picks the SQL (mod 6), bit 4 binds the rest as a BLOB; byte 1
# the layer and head, byte 2 the clip; then hostile text or ids.
hostile = "é<&>\"' \\\x00\x01\x1b\x7f".encode() + b"\x80\xc0\xaf\xed\xa0\x80\xff" + \
    "\u202e\ufffe\U0001f600 ok".encode()
svg_ids = struct.pack("<8i", 256, 0, 60, 38, 195, 169, 255, 258)
for op, lh, clip, arg in [(0, 0x11, 0, hostile), (1, 0x12, 0, hostile), (0 | 16, 0x01, 0, svg_ids),
                          (2, 0, 0, hostile), (2 | 16, 0, 0, svg_ids), (3, 0, 0, b"abc"),
                          (4, 0x01, 10, hostile), (5, 0x03, 2, hostile), (0, 0x07, 0, b"x" * 300)]:
    write("svg", f"op{op}_{len(arg)}_{arg[:4].hex()}", bytes([op, lh, clip]) + arg)

# config, mode 2 with a d_head byte (1 to 8: the attention narrower or
# wider than d_model); a generator of its own, so the seeds above stay
R2 = random.Random(14)
for i in range(6):
    flags, ids = R2.randrange(256), R2.randrange(8)
    shape = [R2.randrange(4), R2.randrange(6), R2.randrange(8), R2.randrange(3),
             R2.randrange(12), R2.randrange(7), 1 + R2.randrange(8), R2.randrange(48)]
    write("config", f"shaped_d_head_{i}", bytes([2, flags, ids] + shape)
          + bytes(R2.randrange(256) for _ in range(48)))
