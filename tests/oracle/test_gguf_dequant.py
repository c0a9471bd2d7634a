"""kvserve's GGUF dequantization against the gguf package's (gguf==0.19.0,
gguf.quants.dequantize), bit for bit, for every tensor type kvserve reads.

Each type gets two tensors in one GGUF written by gguf.GGUFWriter:
  * blocks of random bytes, with every fp16 scale field replaced by a random
    finite fp16 (so every bit of every quant field is exercised; NaN scales
    would only test NaN propagation);
  * for the types gguf.quants.quantize implements, a quantized random matrix
    with outliers (the values real files hold).
The driver (tests/oracle/gguf_dequant_driver.cc) writes kvserve's fp32 values;
they must equal the package's as bit patterns.
"""

import os
import subprocess
import tempfile

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize, quantize  # noqa: E402

BUILD_DIR = os.environ.get("KVSERVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
DRIVER = os.path.join(BUILD_DIR, "tests", "kvserve_gguf_dequant_driver")

T = gguf.GGMLQuantizationType
# Byte offsets of the fp16 scale fields within one block.
SCALE_OFFSETS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}
QUANTIZABLE = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16, T.F16]
ROWS, COLS = 3, 512


def random_blocks(qtype, rng):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = ROWS * COLS // block_elems
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    scales = (rng.standard_normal((blocks, len(SCALE_OFFSETS[qtype]))) * 0.05).astype(np.float16)
    for i, off in enumerate(SCALE_OFFSETS[qtype]):
        raw[:, off : off + 2] = scales[:, i : i + 1].view(np.uint8).reshape(blocks, 2)
    return raw.reshape(ROWS, -1)


def quantized_matrix(qtype, rng):
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[0, 5] = 40.0  # an outlier channel
    x[1, :32] = 0.0  # an all-zero block
    x[2, 100] = -1e-7
    return quantize(x, qtype)


def test_driver_matches_gguf_dequantize():
    assert os.path.exists(DRIVER), f"{DRIVER} is missing: build target kvserve_gguf_dequant_driver"
    rng = np.random.default_rng(52)
    tensors = {}
    for qtype in SCALE_OFFSETS:
        tensors[f"random_{qtype.name}"] = (random_blocks(qtype, rng), qtype)
    for qtype in QUANTIZABLE:
        tensors[f"quantized_{qtype.name}"] = (quantized_matrix(qtype, rng), qtype)
    tensors["plain_F32"] = (rng.standard_normal((ROWS, COLS)).astype(np.float32), T.F32)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "types.gguf")
        writer = gguf.GGUFWriter(path, "llama")
        for name, (data, qtype) in tensors.items():
            writer.add_tensor(name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        proc = subprocess.run([DRIVER, path, tmp], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        checked = []
        for name, (data, qtype) in tensors.items():
            want = dequantize(data, qtype).astype(np.float32).reshape(-1)
            got = np.fromfile(os.path.join(tmp, name + ".f32"), dtype=np.float32)
            assert got.shape == want.shape, name
            diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            assert diff.size == 0, (
                f"{name}: {diff.size} of {want.size} values differ, first at {diff[0]}: "
                f"kvserve {got[diff[0]]!r}, gguf {want[diff[0]]!r}"
            )
            checked.append(qtype.name)
        # Every type kvserve dequantizes was covered.
        assert set(checked) >= {q.name for q in SCALE_OFFSETS} | {"BF16", "F16", "F32"}
