#!/usr/bin/env python3
"""Golden vectors for weft's Q2_K and Q3_K decoders (test/quant/ggml/klow.test.ts).

Decodes random Q2_K and Q3_K blocks with gguf-py's numpy dequantizers (gguf-py/gguf/quants.py of
a llama.cpp checkout, read with `git show`, so nothing is installed) and writes the block bytes and
the f32 values, both base64, to test/fixtures/gguf-klow-golden.json. The tests read that file and
need no Python; run this again only to regenerate it:

    python3 scripts/gguf-klow-golden.py [LLAMA_CPP_GIT_DIR]

(default /work/.mirror/ngxson+llama.cpp/repo; numpy required).

The blocks are random bytes except that d and dmin are kept finite (an f16 exponent of 31 would
decode to Inf or NaN, whose NaN payloads numpy and JS need not agree on), and a few blocks force
the cases where signs and rounding show: d = 0, d negative, d subnormal, dmin = 0, and Q3_K
sub-scales of exactly 32 (a zero scale: ±0 values under a negative d).

gguf-py computes in float32 like ggml's C code (`dequantize_row_q2_K`, `dequantize_row_q3_K`): an
f16 widened exactly, then d * scale, times the code, minus the min, each rounded to f32. Every
product there is exact in f32, so C and numpy both round once (Q2_K's subtraction) or never
(Q3_K). This script checks that: it recomputes each value in float64 from the fields and requires
numpy's float32 result to equal that one correctly rounded value, bit for bit.
"""

import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/ngxson+llama.cpp/repo"
OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "gguf-klow-golden.json"
BLOCKS = 12


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True, text=True).stdout


def load_quants():
    """gguf-py's quants module from the checkout: a package of just the files it imports."""
    pkg = Path(tempfile.mkdtemp()) / "gguf"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("constants.py", "lazy.py", "quants.py"):
        (pkg / name).write_text(git("show", f"HEAD:gguf-py/gguf/{name}"))
    sys.path.insert(0, str(pkg.parent))
    import gguf.quants as quants  # noqa: PLC0415

    return quants


def finite_f16(bits: np.ndarray) -> np.ndarray:
    """The bit patterns with any all-ones exponent (Inf, NaN) lowered by one."""
    exp = (bits >> 10) & 0x1F
    return np.where(exp == 0x1F, bits - (1 << 10), bits).astype(np.uint16)


def put_f16(blocks: np.ndarray, at: int, bits: np.ndarray) -> None:
    blocks[:, at] = bits & 0xFF
    blocks[:, at + 1] = bits >> 8


def q2k_blocks(rng: np.random.Generator) -> np.ndarray:
    b = rng.integers(0, 256, size=(BLOCKS, 84), dtype=np.uint8)
    d = finite_f16(b[:, 80].astype(np.uint16) | (b[:, 81].astype(np.uint16) << 8))
    dmin = finite_f16(b[:, 82].astype(np.uint16) | (b[:, 83].astype(np.uint16) << 8))
    d[0], dmin[0] = 0x0000, 0x3C00  # d = 0: every value is -dmin * m
    d[1], dmin[1] = 0xB800, 0x0000  # d = -0.5, dmin = 0
    d[2], dmin[2] = 0x0001, 0x8003  # subnormal d, negative subnormal dmin
    d[3], dmin[3] = 0x3555, 0x3555  # d = dmin: dl*q - ml lands on zeros and ties
    put_f16(b, 80, d)
    put_f16(b, 82, dmin)
    return b


def q3k_blocks(rng: np.random.Generator) -> np.ndarray:
    b = rng.integers(0, 256, size=(BLOCKS, 110), dtype=np.uint8)
    d = finite_f16(b[:, 108].astype(np.uint16) | (b[:, 109].astype(np.uint16) << 8))
    d[0] = 0x0000  # d = 0
    d[1] = 0xC000  # d = -2
    d[2] = 0x8001  # negative subnormal d
    put_f16(b, 108, d)
    # Block 1: every 6-bit sub-scale 32 (low nibbles 0, high bits 2 = 0b10): all values ±0.
    b[1, 96:104] = 0x00
    b[1, 104:108] = 0xAA
    return b


def f16_fields(b: np.ndarray, at: int) -> np.ndarray:
    return b[:, at : at + 2].copy().view(np.float16).astype(np.float64).reshape(-1)


def check_q2k(b: np.ndarray, got: np.ndarray) -> None:
    """Each value from the struct in float64, rounded once to float32, must be numpy's."""
    d, dmin = f16_fields(b, 80), f16_fields(b, 82)
    want = np.empty((BLOCKS, 256))
    for e in range(256):
        s = e // 16
        q = (b[:, 16 + 32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3
        want[:, e] = d * (b[:, s] & 15) * q - dmin * (b[:, s] >> 4)
    assert np.array_equal(want.astype(np.float32).view(np.uint32), got.view(np.uint32)), "Q2_K rounding"


def check_q3k(b: np.ndarray, got: np.ndarray) -> None:
    d = f16_fields(b, 108)
    want = np.empty((BLOCKS, 256))
    for e in range(256):
        s = e // 16
        low = (b[:, 96 + s] & 15) if s < 8 else (b[:, 96 + s - 8] >> 4)
        sc = (low | (((b[:, 104 + (s & 3)] >> (2 * (s >> 2))) & 3) << 4)).astype(np.int64) - 32
        q = ((b[:, 32 + 32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3).astype(np.int64)
        q -= np.where((b[:, e & 31] >> ((e >> 5) & 7)) & 1, 0, 4)
        want[:, e] = d * sc * q
    # float64 * keeps the sign of a zero product as C's float does.
    assert np.array_equal(want.astype(np.float32).view(np.uint32), got.view(np.uint32)), "Q3_K rounding"


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def main() -> None:
    quants = load_quants()
    rng = np.random.default_rng(20260822)
    commit = git("rev-parse", "HEAD").strip()
    out = {
        "about": "scripts/gguf-klow-golden.py: random blocks decoded by gguf-py quants.py (values: f32 little-endian)",
        "llamaCppCommit": commit,
    }
    for name, cls, make, check in (
        ("Q2_K", quants.Q2_K, q2k_blocks, check_q2k),
        ("Q3_K", quants.Q3_K, q3k_blocks, check_q3k),
    ):
        blocks = make(rng)
        values = cls.dequantize_blocks(blocks).astype(np.float32)
        assert values.dtype == np.float32 and values.shape == (BLOCKS, 256)
        check(blocks, values)
        out[name] = {"blocks": BLOCKS, "bytes": b64(blocks), "values": b64(values.astype("<f4"))}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT} ({BLOCKS} blocks of each type, llama.cpp {commit[:10]})")


if __name__ == "__main__":
    main()
