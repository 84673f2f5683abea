"""One ONNX LSTM (constant weights, batch-major or not) on Ember's cpu backend against ONNX
Runtime, both at the same thread count in one process, timed in alternating rounds so machine
load hits both alike; prints each median, the median per-round ratio Ember / ONNX Runtime,
and the max difference of Ember's outputs from ONNX Runtime's.

    python bench/op_lstm.py [--threads 1] [--rounds 15] [--shapes 1x64x128x128,1x128x128x256]

A shape is batch x seq x input x hidden; --direction bidirectional doubles the work.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from single_op import cpu_name, interleaved

from ember.backends.cpu import CpuBackend
from ember.driver import compile_model


def lstm_model(batch: int, seq: int, inputs: int, hidden: int, direction: str) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    d = 2 if direction == "bidirectional" else 1
    scale = 1 / np.sqrt(hidden)
    weights = {"W": (d, 4 * hidden, inputs), "R": (d, 4 * hidden, hidden), "B": (d, 8 * hidden)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * scale).astype(np.float32), n)
             for n, s in weights.items()]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
                            direction=direction)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inputs])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])



def compare(shape: str, threads: int, rounds: int, direction: str) -> str:
    """One table row: compile time, both medians, the median ratio and the max difference."""
    import onnxruntime as ort

    batch, seq, inputs, hidden = (int(v) for v in shape.split("x"))
    model = lstm_model(batch, seq, inputs, hidden, direction)
    started = time.perf_counter()
    ember = compile_model(model, backend=CpuBackend(num_threads=threads))
    compile_seconds = time.perf_counter() - started
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"X": np.random.default_rng(1).standard_normal((seq, batch, inputs)).astype(np.float32)}
    runs = {"ember": lambda: ember.run(feeds), "ort": lambda: session.run(None, feeds)}
    ours, theirs = list(ember.run(feeds).values()), session.run(None, feeds)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs, strict=True))
    medians, ratio = interleaved(runs, rounds)
    return (f"{shape:>26} {compile_seconds:9.2f} {medians['ember'] * 1e3:9.3f} "
            f"{medians['ort'] * 1e3:9.3f} {ratio:6.2f} {diff:9.1e}")


def main() -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", default="1x64x128x128,1x128x128x128,1x64x128x256,1x128x128x256")
    parser.add_argument("--direction", default="forward")
    args = parser.parse_args()
    print(f"cpu: {cpu_name()}; threads: {args.threads}; direction: {args.direction}; "
          f"onnxruntime {ort.__version__}")
    print(f"{'batch x seq x in x hidden':>26} {'compile s':>9} {'ember ms':>9} {'ort ms':>9} {'ratio':>6} "
          f"{'max diff':>9}")
    for shape in args.shapes.split(","):
        print(compare(shape, args.threads, args.rounds, args.direction), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
