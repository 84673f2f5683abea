"""The integer GEMM (MatMulInteger, QLinearMatMul; constant B, per-tensor zero points) on
Ember's cpu backend against ONNX Runtime, both at the same thread count in one process, timed
in alternating rounds so machine load hits both alike; prints each median, the median
per-round ratio Ember / ONNX Runtime, and the max difference of Ember's outputs from ONNX
Runtime's (MatMulInteger must agree exactly; QLinearMatMul may differ by 1 where ONNX Runtime
rounds with a float32 multiplier and Ember with a float64 one).

    python bench/op_integer_gemm.py [--threads 1] [--rounds 15] [--shapes 128x768x768,...]

A shape is M x K x N; each runs as MatMulInteger u8 x i8, MatMulInteger u8 x u8 and
QLinearMatMul u8 x i8 -> u8.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from single_op import cpu_name, interleaved

from ember.backends.cpu import CpuBackend
from ember.driver import compile_model

VARIANTS = ("MatMulInteger u8xi8", "MatMulInteger u8xu8", "QLinearMatMul u8xi8")


def _model(variant: str, m: int, k: int, n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    op, types = variant.split()
    b_dtype = np.int8 if types.endswith("i8") else np.uint8
    info = np.iinfo(b_dtype)
    b = rng.integers(info.min, info.max, (k, n), endpoint=True).astype(b_dtype)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.array(128, np.uint8), "za"),
             numpy_helper.from_array(np.array(3, b_dtype), "zb")]
    if op == "MatMulInteger":
        node = helper.make_node(op, ["A", "B", "za", "zb"], ["Y"])
        out = TensorProto.INT32
    else:
        inits += [numpy_helper.from_array(np.array(v, np.float32), name)
                  for name, v in (("sa", 0.02), ("sb", 0.01), ("sy", 0.02 * 0.01 * 40 * k ** 0.5))]
        inits.append(numpy_helper.from_array(np.array(128, np.uint8), "zy"))
        node = helper.make_node(op, ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"], ["Y"])
        out = TensorProto.UINT8
    graph = helper.make_graph([node], "integer_gemm",
                              [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k])],
                              [helper.make_tensor_value_info("Y", out, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, {"A": rng.integers(0, 255, (m, k), endpoint=True).astype(np.uint8)}


def compare(variant: str, shape: str, threads: int, rounds: int) -> str:
    import onnxruntime as ort

    m, k, n = (int(v) for v in shape.split("x"))
    model, feeds = _model(variant, m, k, n)
    ember = compile_model(model, backend=CpuBackend(num_threads=threads))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ours, theirs = ember.run(feeds)["Y"], session.run(None, feeds)[0]
    diff = int(np.max(np.abs(ours.astype(np.int64) - theirs.astype(np.int64))))
    runs = {"ember": lambda: ember.run(feeds), "ort": lambda: session.run(None, feeds)}
    medians, ratio = interleaved(runs, rounds)
    gops = 2 * m * k * n / medians["ember"] / 1e9
    return (f"{variant:>20} {shape:>14} {medians['ember'] * 1e3:9.3f} "
            f"{medians['ort'] * 1e3:9.3f} {ratio:6.2f} {gops:8.1f} {diff:9d}")


def main() -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", default="128x768x768,128x768x3072,16x1024x1024")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    print(f"cpu: {cpu_name()}; threads: {args.threads}; onnxruntime {ort.__version__}; "
          f"avx512_vnni: {'avx512_vnni' in open('/proc/cpuinfo').read()}")
    print(f"{'variant':>20} {'M x K x N':>14} {'ember ms':>9} {'ort ms':>9} {'ratio':>6} {'GOP/s':>8} {'max diff':>9}")
    for shape in args.shapes.split(","):
        for variant in args.variants.split(","):
            print(compare(variant, shape, args.threads, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
