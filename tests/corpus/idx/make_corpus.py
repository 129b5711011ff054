#!/usr/bin/env python3
"""Writes the seed corpus of the IDX parser's fuzz target (fuzz/fuzz_idx.cpp) next to this
script. Each file is raw bytes handed to ember::data::parse_idx: valid arrays of every element type
and awkward shapes, plus the malformed cases the parser must reject with an error. Deterministic:
rerunning it rewrites the same files.

    python3 tests/corpus/idx/make_corpus.py
"""
import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def idx(type_code, dims, payload=b""):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    # valid files
    write("u8_images_2x3x4", idx(0x08, [2, 3, 4], bytes(range(24))))
    write("u8_labels_5", idx(0x08, [5], bytes([0, 1, 2, 3, 9])))
    write("i8_vector", idx(0x09, [4], bytes([0x80, 0xFF, 0, 0x7F])))
    write("i16_matrix", idx(0x0B, [2, 2], struct.pack(">4h", 1, -2, 32767, -32768)))
    write("i32_vector", idx(0x0C, [3], struct.pack(">3i", -1, 0, 2**31 - 1)))
    write("f32_vector", idx(0x0D, [2], struct.pack(">2f", 1.5, -0.25)))
    write("f64_scalarish", idx(0x0E, [1], struct.pack(">d", 3.141592653589793)))
    write("u8_empty_array", idx(0x08, [0, 28, 28]))
    write("u8_8dims", idx(0x08, [1] * 8, b"\x2a"))
    write("mnist_like_3x28x28", idx(0x08, [3, 28, 28], bytes((i * 7) % 256 for i in range(3 * 28 * 28))))
    # malformed files
    write("bad_empty", b"")
    write("bad_short", b"\x00\x00")
    write("bad_magic", b"\x12\x34\x56\x78" + bytes(8))
    write("bad_type", idx(0x07, [2], b"\x00\x00"))
    write("bad_zero_dims", bytes([0, 0, 8, 0]))
    write("bad_header_truncated", bytes([0, 0, 8, 3, 0, 0, 0, 2, 0]))
    write("bad_payload_truncated", idx(0x08, [2, 3, 4], bytes(19)))
    write("bad_trailing", idx(0x08, [2], b"\x01\x02\x03"))
    write("bad_overflow", idx(0x0E, [0xFFFFFFFF] * 3, b"\x01"))
    write("bad_huge", idx(0x08, [0x10000, 0x10000, 4], b"\x01\x02\x03"))
    write("bad_255_dims_truncated", bytes([0, 0, 8, 255]) + bytes(40))
    write("bad_gzip", gzip.compress(idx(0x08, [4], b"\x01\x02\x03\x04"), mtime=0))
    write("bad_i32_misaligned", idx(0x0C, [2], b"\x00\x00\x00\x01\x00\x00"))


if __name__ == "__main__":
    main()
