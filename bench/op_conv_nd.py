"""Single-op convolutions beyond 2-D NCHW on Ember's cpu backend against ONNX Runtime:
ConvTranspose (GEMM + col2im) and 1-D Conv (as 2-D with H = 1) by default, 3-D Conv,
3-D ConvTranspose and 1-D pooling on request. Each engine runs in its own process and they
take turns in short blocks (ember.bench.compare); the table gives each median latency and
the median per-pair ratio Ember / ONNX Runtime with its quartiles, and the max difference
of Ember's output from ONNX Runtime's.

    python bench/op_conv_nd.py [--threads 1] [--rounds 15] [--seconds 0.3] [--cases convt2d,conv1d,...]

The issue's goal is a ratio of at most 1.5 at one thread."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from single_op import cpu_name

# name -> (description, op, input shape, weight shape or None, attributes)
CASES: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...] | None, dict]] = {
    "convt2d": ("ConvTranspose 1x64x28x28 -> 32, k4 s2 p1", "ConvTranspose", (1, 64, 28, 28), (64, 32, 4, 4),
                {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "conv1d": ("Conv 1-D 1x64x1000 -> 128, k3 p1", "Conv", (1, 64, 1000), (128, 64, 3), {"pads": [1, 1]}),
    "conv1d_s2": ("Conv 1-D 1x64x1000 -> 128, k5 s2 p2", "Conv", (1, 64, 1000), (128, 64, 5),
                  {"strides": [2], "pads": [2, 2]}),
    "convt1d": ("ConvTranspose 1-D 1x128x250 -> 64, k4 s2 p1", "ConvTranspose", (1, 128, 250), (128, 64, 4),
                {"strides": [2], "pads": [1, 1]}),
    "conv3d": ("Conv 3-D 1x16x16x28x28 -> 32, k3 p1", "Conv", (1, 16, 16, 28, 28), (32, 16, 3, 3, 3),
               {"pads": [1, 1, 1, 1, 1, 1]}),
    "convt3d": ("ConvTranspose 3-D 1x32x8x14x14 -> 16, k2 s2", "ConvTranspose", (1, 32, 8, 14, 14),
                (32, 16, 2, 2, 2), {"strides": [2, 2, 2]}),
    "maxpool1d": ("MaxPool 1-D 1x64x1000, k3 s2 p1", "MaxPool", (1, 64, 1000), None,
                  {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
}
DEFAULT_CASES = "convt2d,conv1d"



def model_for(op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...] | None, attrs: dict) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits, inputs = [], ["X"]
    if w_shape is not None:
        w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
        out_channels = w_shape[1] if op == "ConvTranspose" else w_shape[0]
        inits = [numpy_helper.from_array(w, "W"),
                 numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "B")]
        inputs += ["W", "B"]
    node = helper.make_node(op, inputs, ["Y"], **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def max_difference(path: str, x_shape: tuple[int, ...], threads: int) -> float:
    import onnxruntime as ort

    import ember

    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    ours = ember.compile(path, backend="cpu", num_threads=threads).run({"X": x})["Y"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    theirs = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    return float(np.max(np.abs(ours - theirs)))


def main() -> int:
    import onnxruntime as ort

    from ember.bench import compare

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timed block")
    parser.add_argument("--cases", default=DEFAULT_CASES, help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()
    print(f"cpu: {cpu_name()}; threads: {args.threads}; onnxruntime {ort.__version__}; "
          f"{args.rounds} interleaved rounds of {args.seconds} s")
    print(f"{'case':<46} {'ember ms':>9} {'ort ms':>9} {'ratio':>6} {'q1-q3':>11} {'max diff':>9}")
    with tempfile.TemporaryDirectory(prefix="ember-op-conv-nd-") as folder:
        for name in args.cases.split(","):
            description, op, x_shape, w_shape, attrs = CASES[name]
            path = str(Path(folder) / f"{name}.onnx")
            onnx.save(model_for(op, x_shape, w_shape, attrs), path)
            result = compare(path, args.threads, rounds=args.rounds, seconds=args.seconds, fresh_cache=False)
            diff = max_difference(path, x_shape, args.threads)
            print(f"{description:<46} {result['ember'] * 1e3:9.3f} {result['onnxruntime'] * 1e3:9.3f} "
                  f"{result['ratio']:6.2f} {result['ratio_q1']:5.2f}-{result['ratio_q3']:<5.2f} {diff:9.1e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
