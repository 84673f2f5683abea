"""Ember cpu vs ONNX Runtime on the shared models and a 1024x1024x1024 GEMM with constant
weights, at 1 and 2 threads. Each engine runs in its own long-lived process and the two take
turns in short timing blocks (see ember/bench.py); prints median latencies, the median
Ember/ONNX Runtime ratio of adjacent blocks with its quartiles, GFLOP/s where the FLOP count
is known, and compile times (from an empty cache, and cached).

    python bench/compare.py [--models mlp,resnet18,...] [--threads 1,2] [--rounds 15] [--seconds 0.3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from ember.bench import compare

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"
# Multiply-accumulates x 2 (ResNet-18 and MobileNetV2 from their papers; GEMM exact).
GFLOP = {"resnet18": 3.63, "mobilenetv2": 0.60, "gemm1024": 2.0 * 1024 ** 3 / 1e9}


def gemm_model(folder: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])], "gemm1024",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1024, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 1024])],
        initializer=[numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every ONNX Runtime we compare with
    path = folder / "gemm1024.onnx"
    onnx.save(model, path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,resnet18,mobilenetv2,bert_synthetic,gru,gemm1024")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=15, help="timing blocks per engine")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timing block")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name in args.models.split(","):
            paths[name] = gemm_model(Path(tmp)) if name == "gemm1024" else SHARED / f"{name}.onnx"
            if not paths[name].exists():
                print(f"skipping {name}: {paths[name]} not found", file=sys.stderr)
                del paths[name]
        print(f"{'model':16} {'thr':>3} {'ember ms':>10} {'ort ms':>10} {'ratio':>6} {'(q1-q3)':>11} "
              f"{'GFLOP/s':>8} {'compile s':>9} {'cached s':>8}")
        for threads in [int(t) for t in args.threads.split(",")]:
            for name, path in paths.items():
                r = compare(str(path), threads, rounds=args.rounds, seconds=args.seconds)
                gflops = f"{GFLOP[name] / r['ember']:.1f}" if name in GFLOP else "-"
                spread = f"{r['ratio_q1']:.2f}-{r['ratio_q3']:.2f}"
                print(f"{name:16} {threads:>3} {r['ember'] * 1e3:>10.3f} {r['onnxruntime'] * 1e3:>10.3f} "
                      f"{r['ratio']:>6.2f} {spread:>11} {gflops:>8} {r['compile_first']:>9.2f} "
                      f"{r['compile_cached']:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
