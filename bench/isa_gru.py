"""DeepBench GRU inference sizes (baidu-research/DeepBench code/kernels/rnn_problems.h: hidden
512 and 1024, batch 1 and 4, 25 steps, input size = hidden), the whole layer at one thread,
three engines timed in interleaved rounds: the ISA mapper's GRU (ember.isa.emit_rnn: the input
gates of all steps as one mapped GEMM, M = 25 x batch, the recurrent gates per step as one
mapped GEMM, M = batch, N = 3 x hidden, both weights packed once, and the gate arithmetic;
built with the system compiler), Ember's cpu backend (ember.compile of the ONNX GRU: its
hand-written GEMM kernels and fused elementwise code) and ONNX Runtime's GRU. The model: ONNX
GRU, forward, linear_before_reset = 1 (one recurrent GEMM per step, as cuDNN and DeepBench's
GRU; --linear-before-reset 0: ONNX's default, two recurrent GEMMs per step), biases, zero
initial state.

GFLOP/s count the two GEMMs' flops (2 x 25 x batch x 3 hidden x (inputs + hidden)) over the
whole layer's time, the gates included; peak: this core's measured FMA peak (bench/isa_gemm.py
measured_peak). Ratios: per-round medians, speed-up of the mapped GRU (> 1: faster).

    python bench/isa_gru.py [--rounds 7] [--sizes HIDDEN,BATCH ...] [--seq 25] [--linear-before-reset 0|1]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import ember
import ember.codegen.runtime
from ember.isa.describe import load_target
from ember.isa.emit_rnn import GruCode, emit_gru

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isa_gemm import measured_peak, seconds  # noqa: E402
from single_op import cpu_name  # noqa: E402

GRU = [(512, 1), (512, 4), (1024, 1), (1024, 4)]
RUNTIME = Path(ember.codegen.runtime.__file__).resolve().parent


def gru_model(w: np.ndarray, r: np.ndarray, bias: np.ndarray, seq: int, batch: int, linear_before_reset: int = 1
              ) -> onnx.ModelProto:
    hidden, inputs = r.shape[1], w.shape[1]
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden,
                            linear_before_reset=linear_before_reset)
    graph = helper.make_graph(
        [node], "gru", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inputs])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, 1, batch, hidden]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, batch, hidden])],
        [numpy_helper.from_array(w[None], "W"), numpy_helper.from_array(r[None], "R"),
         numpy_helper.from_array(bias[None], "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mapped_runner(code: GruCode, w: np.ndarray, r: np.ndarray, bias: np.ndarray, x: np.ndarray, folder: Path):
    files = []
    for name, text in code.sources:
        (folder / name).write_text(text)
        files.append(str(folder / name))
    library = folder / f"{code.name}_{code.hidden}_{code.batch}.so"
    subprocess.run(["cc", "-O3", "-march=native", "-shared", "-fPIC", f"-I{RUNTIME}", *code.flags.split(), *files,
                    "-o", str(library)], check=True)
    function = getattr(ctypes.CDLL(str(library)), code.name)
    function.argtypes = [ctypes.c_void_p] * 7
    packed_w, packed_r = code.pack(w, r)  # at compile time
    y = np.empty((code.seq, code.batch, code.hidden), np.float32)
    workspace = np.empty(code.workspace_elements, np.float32)
    keep = (x, packed_w, packed_r, bias, y, workspace)  # the arrays live as long as the runner
    pointers = (x.ctypes.data, packed_w.ctypes.data, packed_r.ctypes.data, bias.ctypes.data, None, y.ctypes.data,
                workspace.ctypes.data)

    def run(keep=keep) -> np.ndarray:
        function(*pointers)
        return keep[4]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seq", type=int, default=25)
    parser.add_argument("--sizes", nargs="*", default=None, metavar="HIDDEN,BATCH")
    parser.add_argument("--linear-before-reset", type=int, choices=(0, 1), default=1)
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.split(",")) for s in args.sizes] if args.sizes else GRU
    target = load_target("x86-avx512")
    with tempfile.TemporaryDirectory() as folder:
        peak = measured_peak(False, Path(folder))
    print(f"CPU: {cpu_name()}; 1 thread; GRU, {args.seq} steps, linear_before_reset = {args.linear_before_reset}; "
          f"GFLOP/s of its GEMMs over the whole layer; peak {peak:.1f} GFLOP/s measured on this core; "
          f"best thread CPU time of ~0.25 s per engine per round, {args.rounds} interleaved rounds")
    print(f"{'hidden,batch':>13} {'mapped':>8} {'ember':>8} {'ort':>8} {'peak%':>6} {'mapped/ember':>13} "
          f"{'mapped/ort':>11} {'mapped us':>10}  register tiles (input / recurrent)")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        for hidden, batch in sizes:
            inputs, seq = hidden, args.seq
            scale = 1 / np.sqrt(hidden)
            w = (rng.standard_normal((3 * hidden, inputs)) * scale).astype(np.float32)
            r = (rng.standard_normal((3 * hidden, hidden)) * scale).astype(np.float32)
            bias = (rng.standard_normal(6 * hidden) * 0.1).astype(np.float32)
            x = rng.standard_normal((seq, batch, inputs)).astype(np.float32)
            code = emit_gru(target, seq, batch, inputs, hidden, linear_before_reset=bool(args.linear_before_reset))
            mapped = mapped_runner(code, w, r, bias, x, Path(folder))
            model = gru_model(w, r, bias, seq, batch, args.linear_before_reset)
            compiled = ember.compile(model, backend="cpu", num_threads=1)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            feed = {"X": x}
            expected = session.run(None, feed)[0].reshape(seq, batch, hidden)
            for name, out in (("mapped", mapped()), ("ember", compiled.run(feed)["Y"])):
                error = float(np.abs(out.reshape(seq, batch, hidden) - expected).max())
                if error > 1e-4:
                    raise SystemExit(f"{name} differs from ONNX Runtime on hidden {hidden}, batch {batch}: "
                                     f"max error {error}")
            runs = {"mapped": mapped, "ember": lambda c=compiled, f=feed: c.run(f),
                    "ort": lambda s=session, f=feed: s.run(None, f)}
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, run in runs.items():
                    times[name].append(seconds(run))
            gflops = {name: code.gemm_flops / statistics.median(values) / 1e9 for name, values in times.items()}
            vs_ember = statistics.median(e / p for p, e in zip(times["mapped"], times["ember"], strict=True))
            vs_ort = statistics.median(o / p for p, o in zip(times["mapped"], times["ort"], strict=True))
            gemms = [code.input_gemm, code.recurrent_gemm] + ([code.reset_gemm] if code.reset_gemm else [])
            tiles = " / ".join(f"{g.mr}x{g.nr}" for g in gemms)
            print(f"{f'{hidden},{batch}':>13} {gflops['mapped']:8.1f} {gflops['ember']:8.1f} {gflops['ort']:8.1f} "
                  f"{100 * gflops['mapped'] / peak:5.1f}% {vs_ember:13.2f} {vs_ort:11.2f} "
                  f"{1e6 * statistics.median(times['mapped']):10.0f}  {tiles}")
    print("ratios are speed-ups of the mapped GRU (>1: faster)")


if __name__ == "__main__":
    main()
