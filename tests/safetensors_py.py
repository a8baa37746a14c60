"""A small, independent safetensors writer and reader (json + struct + numpy),
for the tests: it shares no code with the extension's C.

    blob = write({"a": np.zeros((2, 3), np.float32)}, metadata={"k": "v"})
    tensors, metadata = read(blob)          # {name: (dtype, shape, bytes)}, {...}

Arrays are written as their dtype: float32 -> F32, float16 -> F16; a
BF16 tensor is given as ("BF16", shape, raw bytes) or through bf16_bytes().
"""
import json
import struct

import numpy as np

DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": (None, 2)}


def bf16_bytes(a):
    """float32 array -> BF16 bytes, round to nearest even (as torch does);
    NaN stays NaN."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(a, dtype=np.float32)).ravel()
    out = rounded.astype(np.uint16).ravel()
    out[nan] = ((u.ravel()[nan] >> 16) | 0x40).astype(np.uint16)
    return out.astype("<u2").tobytes()


def bf16_to_f32(raw):
    u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return u.view("<f4")


def _entry(v):
    """(dtype, shape, raw bytes) of an array or of a ready triple."""
    if isinstance(v, tuple):
        return v
    a = np.asarray(v)
    if a.dtype == np.float32:
        return "F32", list(a.shape), np.ascontiguousarray(a, "<f4").tobytes()
    if a.dtype == np.float16:
        return "F16", list(a.shape), np.ascontiguousarray(a, "<f2").tobytes()
    raise TypeError(f"unsupported dtype {a.dtype}")


def write(tensors, metadata=None, header=None, pad=True):
    """tensors: {name: array or (dtype, shape, raw)} in file order. header
    overrides the computed header dict (for malformed-file tests)."""
    h = {}
    if metadata is not None:
        h["__metadata__"] = metadata
    data = bytearray()
    for name, v in tensors.items():
        dtype, shape, raw = _entry(v)
        h[name] = {"dtype": dtype, "shape": list(shape),
                   "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if header is not None:
        h = header
    text = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(data)


def read(blob):
    """-> ({name: (dtype, shape, raw bytes)} in header order, metadata)."""
    (n,) = struct.unpack_from("<Q", blob, 0)
    h = json.loads(blob[8:8 + n])
    meta = h.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, e in h.items():
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], list(e["shape"]), bytes(data[b:end]))
    return out, meta


def to_array(dtype, shape, raw):
    """float32 array of a tensor, independently of the C conversion."""
    if dtype == "BF16":
        return bf16_to_f32(raw).reshape(shape)
    return np.frombuffer(raw, dtype=DTYPES[dtype][0]).astype(np.float32).reshape(shape)
