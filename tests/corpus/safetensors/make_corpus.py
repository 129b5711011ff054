#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors parser (plain Python, no dependencies).

    python3 tests/corpus/safetensors/make_corpus.py     # rewrites the *.safetensors files here

valid_*.safetensors must load; bad_*.safetensors (invalid per the spec; the reference
implementation rejects them too) and unsupported_*.safetensors (valid, but a dtype or rank ember
lacks) must be rejected with ember::Error. The corpus
test (tests/test_safetensors_corpus.cpp) checks exactly that, and the libFuzzer target
(fuzz/fuzz_safetensors.cpp) starts from these files.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def pack(header, data=b"", length=None, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


F32_1 = struct.pack("<f", 1.5)
F32_6 = struct.pack("<6f", *[0.5 * i for i in range(6)])

files = {
    # ---- valid ----
    "valid_empty_header": pack({}),
    "valid_metadata_only": pack({"__metadata__": {"format": "pt", "note": "nothing else"}}),
    "valid_f32_matrix": pack({"__metadata__": {"format": "pt"}, "w": entry("F32", [2, 3], 0, 24)}, F32_6),
    "valid_all_dtypes": pack(
        {
            "f64": entry("F64", [1], 0, 8),
            "i64": entry("I64", [1], 8, 16),
            "f32": entry("F32", [1], 16, 20),
            "i32": entry("I32", [1], 20, 24),
            "f16": entry("F16", [1], 24, 26),
            "bf16": entry("BF16", [1], 26, 28),
            "u8": entry("U8", [1], 28, 29),
            "bool": entry("BOOL", [2], 29, 31),
        },
        struct.pack("<dqfiHHB", 2.0, -3, 1.5, 7, 0x3C00, 0x3FC0, 255) + b"\x01\x00",
    ),
    "valid_scalar_and_empty": pack({"s": entry("F32", [], 0, 4), "e": entry("F32", [0, 5], 4, 4)}, F32_1),
    "valid_unpadded_header": pack({"a": entry("F32", [1], 0, 4)}, F32_1, pad=False),
    "valid_unordered_offsets": pack(
        {"second": entry("F32", [1], 4, 8), "first": entry("F32", [1], 0, 4)}, F32_1 + F32_1
    ),
    # ---- invalid ----
    "bad_short": b"\x08\x00\x00",
    "bad_length_beyond_file": pack({}, length=4096),
    "bad_length_over_100mb": pack({}, length=200_000_000),
    "bad_length_huge": pack({}, length=2**64 - 1),
    "bad_not_utf8": pack(b'{"a\xff":1}'),
    "bad_json": pack(b'{"a": {"dtype": "F32",'),
    "bad_not_object": pack(b"[1, 2, 3]"),
    "bad_entry_not_object": pack({"a": 3}),
    "bad_missing_field": pack({"a": {"dtype": "F32", "shape": [1]}}, F32_1),
    "bad_unknown_dtype": pack({"a": entry("F33", [1], 0, 4)}, F32_1),
    # ---- valid per the spec (the reference loads them) but beyond ember: rejected with a message ----
    "unsupported_i16_dtype": pack({"a": entry("I16", [2], 0, 4)}, F32_1),
    "unsupported_nine_dims": pack({"a": entry("F32", [1] * 9, 0, 4)}, F32_1),
    "bad_negative_dim": pack({"a": entry("F32", [-1], 0, 4)}, F32_1),
    "bad_gap": pack({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, F32_6[:12]),
    "bad_overlap": pack({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, F32_6[:8]),
    "bad_out_of_range": pack({"a": entry("F32", [2], 0, 8)}, F32_1),
    "bad_size_mismatch": pack({"a": entry("F64", [2], 0, 8)}, F32_6[:8]),
    "bad_size_overflow": pack({"a": entry("F32", [2**32, 2**32], 0, 8)}, F32_6[:8]),
    "bad_trailing_bytes": pack({"a": entry("F32", [1], 0, 4)}, F32_1 + b"xy"),
    "bad_duplicate_name": pack(
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        F32_1 + F32_1,
    ),
    "bad_metadata_not_string": pack({"__metadata__": {"k": 1}}),
    "bad_begin_after_end": pack({"a": entry("F32", [0], 8, 4)}, F32_6[:8]),
}

if __name__ == "__main__":
    for name in os.listdir(HERE):
        if name.endswith(".safetensors"):
            os.remove(os.path.join(HERE, name))
    for name, data in sorted(files.items()):
        with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files to {HERE}")
