#!/usr/bin/env python3
"""safetensors interop between ember and the reference implementation (Hugging Face's package).

    safetensors_interop.py write PATH   write the reference tensors with safetensors.numpy
    safetensors_interop.py check PATH   check a file ember wrote: every tensor's dtype, shape and
                                        bytes, and the metadata, through the reference reader

Both sides use the same tensors (see expected()); tests/test_safetensors_interop.cpp runs this.
Exit status 0 on success, 1 on a mismatch, 77 when safetensors/numpy cannot be imported.
"""
import struct
import sys

try:
    import numpy as np
    import safetensors
    import safetensors.numpy as stn
except ImportError as e:  # the C++ test skips with this message
    print(f"skipped: cannot import safetensors/numpy: {e}")
    sys.exit(77)


def expected():
    return {
        "f32": (np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5 - 1.0),
        "f64": np.arange(5, dtype=np.float64) * 0.375 - 0.5,
        "f16": (np.arange(6, dtype=np.float32) * 0.5 - 1.0).astype(np.float16).reshape(2, 3),
        "i32": np.arange(-3, 3, dtype=np.int32),
        "i64": np.array([2**40, -7], dtype=np.int64),
        "u8": np.array([0, 1, 255], dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def bf16_bits(values):
    """bfloat16 bit patterns of float32 values, round to nearest even (as ember converts)."""
    out = []
    for v in values:
        (b,) = struct.unpack("<I", struct.pack("<f", v))
        out.append(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF)
    return out


BF16_VALUES = [1.0, -2.5, 0.1, 3.0e38]


def write(path):
    stn.save_file(expected(), path, metadata={"origin": "python"})


def check(path):
    errors = []
    with safetensors.safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        names = set(f.keys())
    if meta.get("format") != "pt":
        errors.append(f"metadata format is {meta.get('format')!r}, want 'pt'")
    if meta.get("origin") != "ember":
        errors.append(f"metadata origin is {meta.get('origin')!r}, want 'ember'")
    want_names = set(expected()) | {"bf16"}
    if names != want_names:
        errors.append(f"tensor names {sorted(names)} != {sorted(want_names)}")
    with open(path, "rb") as fh:
        raw = dict(safetensors.deserialize(fh.read()))
    for name, want in expected().items():
        if name not in raw:
            continue
        with safetensors.safe_open(path, framework="numpy") as f:
            got = f.get_tensor(name)
        if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
            errors.append(f"{name}: got {got.dtype}{list(got.shape)} {got.ravel()[:6]}, "
                          f"want {want.dtype}{list(want.shape)} {want.ravel()[:6]}")
    if "bf16" in raw:
        t = raw["bf16"]
        bits = list(struct.unpack(f"<{len(t['data']) // 2}H", bytes(t["data"])))
        if t["dtype"] != "BF16" or list(t["shape"]) != [len(BF16_VALUES)] or bits != bf16_bits(BF16_VALUES):
            errors.append(f"bf16: got {t['dtype']}{t['shape']} bits {bits}, want BF16 bits {bf16_bits(BF16_VALUES)}")
    if errors:
        print("interop check failed:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print(f"ok: {len(names)} tensors read by safetensors {safetensors.__version__}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
