#!/usr/bin/env python3
"""Golden vectors for weft's i-quant codecs (test/quant/ggml/iquant.test.ts).

Decodes random IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL and IQ4_XS blocks with gguf-py's
numpy dequantizers (gguf-py/gguf/quants.py of a llama.cpp checkout, read with `git show`, so
nothing is installed) and writes the block bytes and the f32 values, both base64, to
test/fixtures/gguf-iquant-golden.json, with an FNV-1a hash of each codebook as gguf-py decodes it
(its own packed copy of ggml-common.h's grids) and of its ksigns table, and llama.cpp's own
quantizers' error on a matrix the test draws the same way (the bar weft's encoders must clear).
The tests read that file and need neither Python nor a compiler; run this again only to
regenerate it:

    python3 scripts/gguf-iquant-golden.py [LLAMA_CPP_GIT_DIR]

(default /work/.mirror/ngxson+llama.cpp/repo; needs numpy >= 2 and a C compiler; about 20 s).

The blocks are random bytes except that d is kept finite (an f16 exponent of 31 decodes to Inf or
NaN, whose payloads numpy and JS need not agree on), and the first blocks of each type force the
cases where signs and rounding show: d = 0 (±0 under the sign bits), d negative, d subnormal, and
for IQ4_XS a sub-block scale of exactly 32 (a zero scale).

Does gguf-py round like ggml's C code? Read line by line, each dequantizer is float32 throughout
under numpy 2's promotion rules (NEP 50: `np.float32(0.5) + uint8 array` stays float32, IQ3_S's
`d * (1 + 2 * scales)` multiplies float32 by uint8, IQ4_XS's int8 scale is cast to float32), in C's
order: d·(0.5 + s) rounded, times 0.25 or 0.5 (exact), times the grid byte rounded, times ±1.
Rather than trust that reading, this script builds llama.cpp's own `dequantize_row_iq*`
(ggml/src/ggml-quants.c of the same checkout, compiled into a temporary directory, nothing kept)
and requires its f32 output to equal numpy's bit for bit, signed zeros included: it does, for
every type. (Under numpy 1's value-based casting the uint8 arithmetic could promote differently,
so the script refuses numpy < 2.) It also checks gguf-py's grids, ksigns and IQ4 values against
the tables in ggml-common.h.
"""

import base64
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/ngxson+llama.cpp/repo"
OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "gguf-iquant-golden.json"

# name: (GGML type id, values per block, bytes per block, blocks, ggml-quants.c's dequantizer)
TYPES = {
    "IQ2_XXS": (16, 256, 66, 4, "dequantize_row_iq2_xxs"),
    "IQ2_XS": (17, 256, 74, 4, "dequantize_row_iq2_xs"),
    "IQ2_S": (22, 256, 82, 4, "dequantize_row_iq2_s"),
    "IQ3_XXS": (18, 256, 98, 4, "dequantize_row_iq3_xxs"),
    "IQ3_S": (21, 256, 110, 4, "dequantize_row_iq3_s"),
    "IQ4_NL": (20, 32, 18, 12, "dequantize_row_iq4_nl"),
    "IQ4_XS": (23, 256, 136, 4, "dequantize_row_iq4_xs"),
}
# ggml-common.h table of each gguf-py class's grid.
GRIDS = {"IQ2_XXS": "iq2xxs_grid", "IQ2_XS": "iq2xs_grid", "IQ2_S": "iq2s_grid", "IQ3_XXS": "iq3xxs_grid", "IQ3_S": "iq3s_grid"}


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


def make_blocks(rng: np.random.Generator, name: str) -> np.ndarray:
    _, _, size, count, _ = TYPES[name]
    b = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
    d = finite_f16(b[:, 0].astype(np.uint16) | (b[:, 1].astype(np.uint16) << 8))
    d[0] = 0x0000  # d = 0: every value ±0, the sign from the sign bits
    d[1] = 0xC000  # d = -2
    d[2] = 0x0003  # subnormal d
    b[:, 0] = d & 0xFF
    b[:, 1] = d >> 8
    if name == "IQ4_XS":
        # Block 1, sub-block 0: ls = 32 (low nibble 0, high bits 2), a zero scale under d = -2.
        b[1, 4] &= 0xF0
        b[1, 2] = (b[1, 2] & 0xFC) | 2
    return b


def fnv1a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def common_table(src: str, table: str) -> list[int]:
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + table + r", \w+\)(.*?)GGML_TABLE_END", src, re.S)
    assert m, table
    return [int(v, 0) for v in re.findall(r"-?(?:0x[0-9a-fA-F]+|\d+)", m.group(1))]


def grid_bytes(quants, name: str) -> bytes:
    cls = getattr(quants, name)
    cls.init_grid()
    return cls.grid.reshape(-1).astype(np.uint8).tobytes()


def check_tables(quants, common: str) -> None:
    """gguf-py's grids and ksigns are ggml-common.h's, entry for entry."""
    for name, table in GRIDS.items():
        width = 8 if name.startswith("IQ2") else 4
        want = b"".join(v.to_bytes(width, "little") for v in common_table(common, table))
        assert grid_bytes(quants, name) == want, f"{name}: gguf-py's grid is not ggml-common.h's {table}"
    assert quants.IQ2_XXS.ksigns == bytes(common_table(common, "ksigns_iq2xs")), "ksigns"
    assert list(quants.IQ4_NL.kvalues) == common_table(common, "kvalues_iq4nl"), "kvalues_iq4nl"


def lcg(seed: int):
    """Uniforms in [0, 1) from the LCG x' = 1664525·x + 1013904223 mod 2^32 (the test draws the same)."""
    state = seed

    def draw() -> float:
        nonlocal state
        state = (state * 1664525 + 1013904223) % 2**32
        return state / 2**32

    return draw


def test_matrix() -> tuple[np.ndarray, np.ndarray]:
    """The matrix [ROWS, COLS] and column importance the test encodes, drawn exactly as it draws
    them: per column a scale 2^(−1..1), then an importance 2^(−3..3), then row by row values
    (Σ of 12 uniforms − 6)·scale, all exact in float64 before the rounding to float32."""
    u = lcg(20260822)
    scale = [2.0 ** (int(u() * 3) - 1) for _ in range(COLS)]
    importance = [2.0 ** (int(u() * 7) - 3) for _ in range(COLS)]
    x = [(sum(u() for _ in range(12)) - 6) * scale[c] for _ in range(ROWS) for c in range(COLS)]
    return np.array(x, dtype=np.float32), np.array(importance, dtype=np.float32)


ROWS, COLS = 16, 1024

C_MAIN = """#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-quants.h"
void ggml_abort(const char *f, int l, const char *fmt, ...) { abort(); }
size_t ggml_row_size(enum ggml_type t, int64_t n) { abort(); }
const char *ggml_type_name(enum ggml_type t) { abort(); }
size_t ggml_type_size(enum ggml_type t) { abort(); }
#define DEQUANTIZE(name, fn) if (!strcmp(type, name)) fn((const void *) q, y, k);
/* dequantize TYPE NBYTES K < blocks > f32; quantize TYPE ROWS COLS IMATRIX|- < f32 > f32 (decoded) */
int main(int argc, char **argv) {
  const char *type = argv[2];
  long k, n;
  unsigned char *q;
  if (!strcmp(argv[1], "quantize")) {
    long rows = atol(argv[3]), cols = atol(argv[4]);
    k = rows * cols;
    float *x = malloc(4 * k), *im = NULL;
    if (fread(x, 4, k, stdin) != (size_t) k) return 1;
    if (strcmp(argv[5], "-")) {
      im = malloc(4 * cols);
      FILE *f = fopen(argv[5], "rb");
      if (fread(im, 4, cols, f) != (size_t) cols) return 1;
    }
    q = malloc(4 * k);
    QUANTIZE_CALLS
  } else {
    n = atol(argv[3]); k = atol(argv[4]);
    q = malloc(n);
    if (fread(q, 1, n, stdin) != (size_t) n) return 1;
  }
  float *y = malloc(4 * k);
  DEQUANTIZE_CALLS
  fwrite(y, 4, k, stdout);
  return 0;
}
"""


class LlamaCpp:
    """ggml-quants.c of the checkout, built with the system C compiler in a temporary directory."""

    def __enter__(self):
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            sys.exit("need a C compiler to build ggml-quants.c")
        self.work = Path(tempfile.mkdtemp())
        files = ["ggml/include", "ggml/src/ggml-quants.c", "ggml/src/ggml-quants.h", "ggml/src/ggml-common.h"]
        files += ["ggml/src/ggml-impl.h", "ggml/src/ggml-cpu/ggml-cpu-impl.h"]
        tar = subprocess.run(["git", "-C", REPO, "archive", "HEAD", *files], check=True, capture_output=True).stdout
        subprocess.run(["tar", "x", "-C", str(self.work)], input=tar, check=True)
        dequantize = "\n  ".join(f'DEQUANTIZE("{n}", {fn})' for n, (*_, fn) in TYPES.items())
        # The lattice quantizers need their codebook's search tables built first (ggml_quantize_init).
        init = {"IQ2_XXS": "iq2xs_init_impl(GGML_TYPE_IQ2_XXS); ", "IQ2_XS": "iq2xs_init_impl(GGML_TYPE_IQ2_XS); "}
        init |= {"IQ2_S": "iq2xs_init_impl(GGML_TYPE_IQ2_S); ", "IQ3_XXS": "iq3xs_init_impl(256); ", "IQ3_S": "iq3xs_init_impl(512); "}
        quantize = "\n    ".join(
            f'if (!strcmp(type, "{n}")) {{ {init.get(n, "")}quantize_{n.lower()}(x, q, rows, cols, im); }}' for n in TYPES
        )
        main = C_MAIN.replace("DEQUANTIZE_CALLS", dequantize).replace("QUANTIZE_CALLS", quantize)
        (self.work / "main.c").write_text(main)
        src = self.work / "ggml" / "src"
        self.exe = self.work / "iquant"
        # Plain -O2: no -march, so no FMA contraction (the dequantizers have no a·b + c anyway).
        subprocess.run(
            [cc, "-O2", "-I", str(src), "-I", str(self.work / "ggml" / "include"), str(self.work / "main.c"),
             str(src / "ggml-quants.c"), "-lm", "-o", str(self.exe)],
            check=True,
        )
        return self

    def __exit__(self, *_):
        shutil.rmtree(self.work)

    def run(self, args: list[str], data: bytes) -> np.ndarray:
        return np.frombuffer(subprocess.run([str(self.exe), *args], input=data, check=True, capture_output=True).stdout, "<f4")

    def dequantize(self, name: str, blocks: np.ndarray) -> np.ndarray:
        _, elems, _, count, _ = TYPES[name]
        return self.run(["dequantize", name, str(blocks.size), str(count * elems)], blocks.tobytes()).reshape(count, elems)

    def quantize(self, name: str, x: np.ndarray, importance: np.ndarray | None) -> np.ndarray:
        """llama.cpp's quantize_iq* (importance as its imatrix) then its dequantizer."""
        path = "-"
        if importance is not None:
            path = str(self.work / "imatrix.bin")
            Path(path).write_bytes(importance.astype("<f4").tobytes())
        return self.run(["quantize", name, str(ROWS), str(COLS), path], x.astype("<f4").tobytes())


def relative_error(x: np.ndarray, y: np.ndarray, c: np.ndarray) -> float:
    """√(Σ c·(x − y)² / Σ c·x²), c each column's weight, in float64."""
    x64, d = x.astype(np.float64).reshape(ROWS, COLS), (x.astype(np.float64) - y).reshape(ROWS, COLS)
    return float(np.sqrt((c * d * d).sum() / (c * x64 * x64).sum()))


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def main() -> None:
    if int(np.__version__.split(".")[0]) < 2:
        sys.exit(f"numpy {np.__version__}: need numpy >= 2 (NEP 50 promotion, float32 like ggml)")
    quants = load_quants()
    commit = git("rev-parse", "HEAD").strip()
    check_tables(quants, git("show", "HEAD:ggml/src/ggml-common.h"))
    rng = np.random.default_rng(20260822)
    blocks = {name: make_blocks(rng, name) for name in TYPES}
    values = {}
    for name, b in blocks.items():
        v = getattr(quants, name).dequantize_blocks(b)
        assert v.dtype == np.float32 and v.shape == (TYPES[name][3], TYPES[name][1]), name
        values[name] = v
    x, importance = test_matrix()
    ones = np.ones(COLS, dtype=np.float32)
    errors = {}
    with LlamaCpp() as llama:
        for name in TYPES:
            got = llama.dequantize(name, blocks[name])
            same = got.view(np.uint32) == values[name].view(np.uint32)
            assert same.all(), f"{name}: gguf-py and ggml-quants.c differ at {np.argwhere(~same)[:4].tolist()}"
            # llama.cpp refuses IQ2_XXS and IQ2_XS without an imatrix: all ones stands in (its
            # weights are then √(σ² + x²), weft's without importance).
            plain = ones if name in ("IQ2_XXS", "IQ2_XS") else None
            errors[name] = {
                "none": relative_error(x, llama.quantize(name, x, plain), ones),
                "importance": relative_error(x, llama.quantize(name, x, importance), importance),
            }
    out = {
        "about": "scripts/gguf-iquant-golden.py: random blocks decoded by gguf-py quants.py (values: f32 little-endian)",
        "llamaCppCommit": commit,
        # FNV-1a 32 of each grid's coordinates (entry i, byte j at 8i + j or 4i + j) and of ksigns.
        "gridHash": {name: fnv1a(grid_bytes(quants, name)) for name in GRIDS},
        "ksignsHash": fnv1a(quants.IQ2_XXS.ksigns),
        "iq4nlValues": list(quants.IQ4_NL.kvalues),
        # llama.cpp's quantize_iq* on the test's matrix: √(Σ c·(x − x̂)² / Σ c·x²), c = 1 without
        # importance and the importance with it.
        "llamaCppError": {"rows": ROWS, "cols": COLS, **errors},
    }
    for name, b in blocks.items():
        out[name] = {"blocks": len(b), "bytes": b64(b), "values": b64(values[name].astype("<f4"))}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT} (llama.cpp {commit[:10]}; gguf-py equals ggml-quants.c on every block)")
    for name, e in errors.items():
        print(f"  llama.cpp {name}: relative error {e['none']:.4f} unweighted, {e['importance']:.4f} with importance")


if __name__ == "__main__":
    main()
