"""Single-op Resize (and GridSample) models on Ember's cpu backend against ONNX Runtime, both
at the same thread count in one process, timed in alternating rounds so machine load hits
both alike; prints each median, the median per-round ratio Ember / ONNX Runtime (the issue's
goal: at most 1.5 at 1 thread), the kernel Ember selected and the max difference of Ember's
output from ONNX Runtime's.

    python bench/op_resize.py [--threads 1] [--rounds 15] [--cases up2_linear,up2_nearest,...]
"""
from __future__ import annotations

import argparse
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from single_op import cpu_name, interleaved

from ember.backends.cpu import CpuBackend
from ember.driver import compile_model

# name: (input shape, Resize attributes, scales or None, sizes or None)
CASES = {
    "up2_linear": ((1, 64, 56, 56), {"mode": "linear"}, [1, 1, 2, 2], None),
    "up2_nearest": ((1, 64, 56, 56), {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                      "nearest_mode": "floor"}, [1, 1, 2, 2], None),
    "up2_nearest_half_pixel": ((1, 64, 56, 56), {"mode": "nearest"}, [1, 1, 2, 2], None),
    "down2_linear": ((1, 64, 112, 112), {"mode": "linear"}, [1, 1, 0.5, 0.5], None),
    "down_linear_align": ((1, 64, 112, 112), {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                          None, [1, 64, 75, 75]),
    "up2_cubic": ((1, 64, 56, 56), {"mode": "cubic"}, [1, 1, 2, 2], None),
    "down2_linear_antialias": ((1, 64, 112, 112), {"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.5], None),
    "up_linear_3ch_image": ((1, 3, 320, 320), {"mode": "linear"}, None, [1, 3, 640, 640]),
    "grid_sample_bilinear": ((1, 64, 56, 56), {"op": "GridSample", "mode": "linear"}, None, [1, 56, 56, 2]),
}



def resize_model(shape, attributes: dict, scales, sizes) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    attributes = dict(attributes)
    if attributes.pop("op", "Resize") == "GridSample":
        grid = rng.uniform(-1.1, 1.1, sizes).astype(np.float32)
        node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attributes)
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                  helper.make_tensor_value_info("grid", TensorProto.FLOAT, sizes)]
        graph = helper.make_graph([node], "grid_sample", inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), {"x": x, "grid": grid}
    inits, names = [], ["x", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
        names.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
        names += ["", "sizes"]
    node = helper.make_node("Resize", names, ["y"], **attributes)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), {"x": x}



def compare(name: str, threads: int, rounds: int) -> str:
    """One table row: both medians, the median ratio, the kernel and the max difference."""
    import onnxruntime as ort

    model, feeds = resize_model(*CASES[name])
    ember = compile_model(model, backend=CpuBackend(num_threads=threads))
    kernels = sorted(set(re.findall(r"\[(\w+)\] from node", ember.executable.source)))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    runs = {"ember": lambda: ember.run(feeds), "ort": lambda: session.run(None, feeds)}
    ours, theirs = list(ember.run(feeds).values())[0], session.run(None, feeds)[0]
    diff = float(np.max(np.abs(ours - theirs)))
    medians, ratio = interleaved(runs, rounds)
    shape = "x".join(map(str, CASES[name][0]))
    out = "x".join(map(str, ours.shape))
    return (f"{name:>24} {shape + ' -> ' + out:>30} {medians['ember'] * 1e3:9.3f} "
            f"{medians['ort'] * 1e3:9.3f} {ratio:6.2f} {','.join(kernels):>22} {diff:9.1e}")


def main() -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()
    print(f"cpu: {cpu_name()}; threads: {args.threads}; onnxruntime {ort.__version__}")
    print(f"{'case':>24} {'shape':>30} {'ember ms':>9} {'ort ms':>9} {'ratio':>6} {'kernel':>22} {'max diff':>9}")
    for name in args.cases.split(","):
        print(compare(name, args.threads, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
