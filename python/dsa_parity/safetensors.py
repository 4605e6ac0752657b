"""Safetensors files in pure numpy (https://huggingface.co/docs/safetensors).

An 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets},
"__metadata__": {str: str}}, then the raw little-endian bytes. numpy has no bfloat16: BF16 tensors
are read as uint16 arrays (the raw bits); bf16_to_f32 and f32_to_bf16 convert. When writing,
uint16 arrays are BF16 unless `dtypes` says otherwise.
"""

import json
import struct

import numpy as np

# safetensors dtype name -> numpy dtype (little-endian); BF16 is carried as its uint16 bits.
DTYPES = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
}

_FROM_NUMPY = {
    np.dtype("uint16"): "BF16",
    np.dtype("float16"): "F16",
    np.dtype("float32"): "F32",
    np.dtype("float64"): "F64",
    np.dtype("int32"): "I32",
    np.dtype("int64"): "I64",
    np.dtype("uint8"): "U8",
}


class SafetensorsError(ValueError):
    """A malformed file."""


def bf16_to_f32(bits):
    """uint16 BF16 bits -> float32 values (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """float values -> uint16 BF16 bits, rounded to nearest even (NaN stays NaN)."""
    x = np.asarray(values, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, (u >> 16).astype(np.uint16) | np.uint16(0x0040), rounded)
    return rounded.astype(np.uint16)


def parse(data, what="safetensors"):
    """bytes -> (tensors: {name: ndarray}, dtypes: {name: str}, metadata: {str: str})."""
    if len(data) < 8:
        raise SafetensorsError("%s: shorter than the 8-byte header length" % what)
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise SafetensorsError("%s: header length %d exceeds the file size" % (what, n))
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: header is not valid JSON: %s" % (what, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % what)
    body = memoryview(data)[8 + n:]
    tensors, dtypes, metadata = {}, {}, {}
    for name, v in header.items():
        if name == "__metadata__":
            metadata = dict(v)
            continue
        dt = v.get("dtype")
        if dt not in DTYPES:
            raise SafetensorsError("%s: tensor %r has unsupported dtype %r" % (what, name, dt))
        shape = tuple(int(s) for s in v["shape"])
        b0, b1 = (int(o) for o in v["data_offsets"])
        npd = DTYPES[dt]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= b0 <= b1 <= len(body)) or b1 - b0 != count * npd.itemsize:
            raise SafetensorsError("%s: tensor %r data_offsets [%d, %d) do not fit its dtype and shape" % (what, name, b0, b1))
        tensors[name] = np.frombuffer(body[b0:b1], dtype=npd).reshape(shape).copy()
        dtypes[name] = dt
    return tensors, dtypes, metadata


def read(path):
    """path -> (tensors, dtypes, metadata); see parse."""
    with open(path, "rb") as f:
        return parse(f.read(), path)


def load(path):
    """path -> {name: ndarray} (BF16 as uint16 bits)."""
    return read(path)[0]


def serialize(tensors, metadata=None, dtypes=None):
    """{name: ndarray} -> bytes. dtypes: {name: safetensors dtype} to override the numpy mapping
    (uint16 -> BF16, float16 -> F16, float32 -> F32, float64 -> F64, int32 -> I32, int64 -> I64)."""
    dtypes = dtypes or {}
    header, chunks, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        dt = dtypes.get(name) or _FROM_NUMPY.get(a.dtype)
        if dt is None:
            raise TypeError("tensor %r: numpy dtype %s has no safetensors dtype" % (name, a.dtype))
        b = np.ascontiguousarray(a, dtype=DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


def write(path, tensors, metadata=None, dtypes=None):
    """Writes tensors to path (see serialize)."""
    data = serialize(tensors, metadata, dtypes)
    with open(path, "wb") as f:
        f.write(data)


def to_float(array, dtype):
    """A tensor as read (BF16 as bits) -> float64 values."""
    if dtype == "BF16":
        return bf16_to_f32(array).astype(np.float64)
    return np.asarray(array, dtype=np.float64)
