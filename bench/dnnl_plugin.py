"""Ember's dnnl plugin (plugins/ember-dnnl: oneDNN behind the plugin API) side by side with
Ember's cpu backend and ONNX Runtime, and cost-based assignment across dnnl and cpu.

1. The shared models at 1 and 2 threads: ember cpu, ember dnnl and ONNX Runtime, each in its
   own long-lived process, taking turns in short timing blocks (the order rotates every round).
   Latency = median of the blocks' medians; ratios = median over rounds of the per-round ratio.
2. A model built here where each backend wins some layers: an SPPF-style pooling block
   (MaxPool 5x5 stride 1, chained, as in YOLOv5; AveragePool) between 3x3 convolutions, and a
   VGG-style classifier head (Gemm 4096x4096 at batch 1). oneDNN's JIT pooling is far faster
   than Ember's loops; Ember's Winograd 3x3 convolutions and its batch-1 GEMM beat oneDNN's.
   Compiled as backend="dnnl", "cpu", priority ["dnnl", "cpu"] and "auto" with measured
   costs (EMBER_PARTITION_COST=measured: every unit timed on every backend), all timed in one
   interleaved run; the claim checked: auto <= the best single backend and <= priority.

    python bench/dnnl_plugin.py [--models mlp,resnet18,...] [--threads 1,2] [--rounds 12]
                                [--seconds 0.3] [--mixed-threads 1] [--skip-models] [--skip-mixed]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ember.support.host import cpu_name

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"




def mixed_model(folder: Path) -> Path:
    """The model where each backend wins some layers (see the module docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights, nodes = {}, []

    def conv(x: str, name: str, channels: int) -> str:
        weights[f"{name}.w"] = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels))
        weights[f"{name}.b"] = rng.standard_normal(channels) * 0.1
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.c"], pads=[1] * 4))
        nodes.append(helper.make_node("Relu", [f"{name}.c"], [name]))
        return name

    def pool(x: str, name: str, op: str, kernel: int, stride: int) -> str:
        nodes.append(helper.make_node(op, [x], [name], kernel_shape=[kernel] * 2, strides=[stride] * 2,
                                      pads=[kernel // 2] * 4))
        return name

    def dense(x: str, name: str, k: int, n: int, relu: bool = True) -> str:
        weights[f"{name}.w"] = rng.standard_normal((k, n)) / np.sqrt(k)
        weights[f"{name}.b"] = rng.standard_normal(n) * 0.1
        nodes.append(helper.make_node("Gemm", [x, f"{name}.w", f"{name}.b"], [f"{name}.g" if relu else name]))
        if relu:
            nodes.append(helper.make_node("Relu", [f"{name}.g"], [name]))
        return name

    x = conv("x", "conv1", 64)
    x = pool(pool(x, "spp1", "MaxPool", 5, 1), "spp2", "MaxPool", 5, 1)
    x = pool(conv(x, "conv2", 64), "down", "AveragePool", 3, 2)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    x = dense(dense(dense("flat", "fc1", 64, 4096), "fc2", 4096, 4096), "logits", 4096, 1000, relu=False)
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1000])],
                              [numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "mixed.onnx"
    onnx.save(model, path)
    return path


# one engine per process ---------------------------------------------------------------------


def serve(spec: str, model: str, threads: int) -> None:
    """In a child: load one engine ("onnxruntime", or "ember:" + a backend, a list joined by
    commas), then answer one timing block per request line on stdin (JSON lines on stdout)."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    data = dict(np.load(Path(model).with_suffix(".ref.npz"))) if Path(model).with_suffix(".ref.npz").exists() else {}
    rng = np.random.default_rng(0)
    info: dict = {}
    if spec == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        shapes = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in session.get_inputs()}
        kinds = {i.name: np.float32 if i.type == "tensor(float)" else np.int64 for i in session.get_inputs()}

        def run():
            return session.run(None, feeds)
    else:
        import ember

        names = spec.split(":", 1)[1].split(",")
        started = time.perf_counter()
        compiled = ember.compile(model, backend=names if len(names) > 1 else names[0], num_threads=threads)
        info = {"compile_seconds": time.perf_counter() - started, "partition": compiled.stats.get("partition", "")}
        shapes = {s.name: list(s.type.shape) for s in compiled.inputs}
        kinds = {s.name: s.type.dtype.numpy for s in compiled.inputs}

        def run():
            return list(compiled.run(feeds).values())
    feeds = {name: data[f"in_{name}"] if f"in_{name}" in data else
             (rng.standard_normal(shape).astype(kinds[name]) if np.dtype(kinds[name]).kind == "f"
              else np.zeros(shape, kinds[name])) for name, shape in shapes.items()}
    outputs = run()
    for _ in range(2):
        run()
    info["checksum"] = float(sum(np.abs(np.asarray(o, np.float64)).sum() for o in outputs))
    protocol.write(json.dumps({"ready": True, **info}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        request, times = json.loads(line), []
        start = time.perf_counter()
        while len(times) < request["min_runs"] or time.perf_counter() - start < request["seconds"]:
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        protocol.write(json.dumps({"times": times}) + "\n")
        protocol.flush()


class Worker:
    def __init__(self, label: str, spec: str, model: Path, threads: int, env: dict | None = None) -> None:
        self.label = label
        # One BLAS thread: NumPy's pool (Ember folds constants with NumPy) would spin on the cores.
        environ = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                       **(env or {}))
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", spec, str(model), str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environ)
        self.info = self.reply()

    def reply(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label} failed to start (see its stderr above)")
        return json.loads(line)

    def block(self, seconds: float) -> list[float]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"seconds": seconds, "min_runs": 3}) + "\n")
        self.process.stdin.flush()
        return self.reply()["times"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def interleaved(workers: list[Worker], rounds: int, seconds: float) -> dict[str, dict]:
    """Per worker, the median of its block medians (each round weighs the same: on a loaded
    machine a fast block holds many more runs than a slow one) and the block medians."""
    times: dict[str, list[float]] = {w.label: [] for w in workers}
    blocks: dict[str, list[float]] = {w.label: [] for w in workers}
    for round_ in range(rounds):
        shift = round_ % len(workers)
        for worker in workers[shift:] + workers[:shift]:
            block = worker.block(seconds)
            times[worker.label] += block
            blocks[worker.label].append(statistics.median(block))
            time.sleep(0.05)  # the previous engine's threads may spin a moment
    return {w.label: {"median": statistics.median(blocks[w.label]), "blocks": blocks[w.label], "info": w.info,
                      "runs": len(times[w.label])} for w in workers}


def ratio(results: dict, a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(results[a]["blocks"], results[b]["blocks"], strict=True))


def run_workers(specs: list[tuple[str, str, int, dict | None]], model: Path, rounds: int, seconds: float) -> dict:
    workers: list[Worker] = []
    try:
        for label, spec, threads, env in specs:
            workers.append(Worker(label, spec, model, threads, env))
        return interleaved(workers, rounds, seconds)
    finally:
        for worker in workers:
            worker.close()


def bench_models(models: list[str], threads_list: list[int], rounds: int, seconds: float) -> None:
    print(f"{'model':16s} {'thr':>3s} {'ember cpu':>10s} {'ember dnnl':>10s} {'ORT':>10s} "
          f"{'dnnl/cpu':>9s} {'dnnl/ORT':>9s} {'cpu/ORT':>8s}")
    for name in models:
        path = SHARED / f"{name}.onnx"
        for threads in threads_list:
            results = run_workers([("cpu", "ember:cpu", threads, None), ("dnnl", "ember:dnnl", threads, None),
                                   ("ort", "onnxruntime", threads, None)], path, rounds, seconds)
            ms = {k: v["median"] * 1e3 for k, v in results.items()}
            print(f"{name:16s} {threads:3d} {ms['cpu']:8.3f}ms {ms['dnnl']:8.3f}ms {ms['ort']:8.3f}ms "
                  f"{ratio(results, 'dnnl', 'cpu'):9.2f} {ratio(results, 'dnnl', 'ort'):9.2f} "
                  f"{ratio(results, 'cpu', 'ort'):8.2f}", flush=True)


def bench_mixed(threads: int, rounds: int, seconds: float) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        path = mixed_model(Path(tmp))
        measured = {"EMBER_PARTITION_COST": "measured"}
        results = run_workers([("ember cpu", "ember:cpu", threads, None), ("ember dnnl", "ember:dnnl", threads, None),
                               ("priority [dnnl, cpu]", "ember:dnnl,cpu", threads, None),
                               ("auto (measured costs)", "ember:auto", threads, measured),
                               ("ONNX Runtime", "onnxruntime", threads, None)], path, rounds, seconds)
    best = min(("ember cpu", "ember dnnl"), key=lambda k: results[k]["median"])
    print(f"\nmixed model (SPPF pooling between 3x3 convs, batch-1 4096x4096 head), {threads} thread(s), "
          f"{rounds} rounds:")
    print(f"{'engine':24s} {'latency':>10s} {'vs best single':>15s} {'compile':>8s}  checksum")
    for label, result in results.items():
        compile_s = result["info"].get("compile_seconds")
        print(f"{label:24s} {result['median'] * 1e3:8.3f}ms {ratio(results, label, best):15.3f} "
              f"{'' if compile_s is None else f'{compile_s:7.1f}s':>8s}  {result['info']['checksum']:.6g}")
    print("\nauto's partition:\n" + results["auto (measured costs)"]["info"]["partition"])
    auto = results["auto (measured costs)"]["median"]
    holds = auto <= results[best]["median"] and auto <= results["priority [dnnl, cpu]"]["median"]
    print(f"auto <= best single backend ({best}) and <= priority: {'yes' if holds else 'NO'}")
    return holds


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,resnet18,mobilenetv2,bert_synthetic")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=12, help="timing blocks per engine")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timing block")
    parser.add_argument("--mixed-threads", type=int, default=1)
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--skip-mixed", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}")
    if not args.skip_models:
        if not SHARED.is_dir():
            print(f"shared models absent ({SHARED}): skipping them")
        else:
            bench_models(args.models.split(","), [int(t) for t in args.threads.split(",")], args.rounds,
                         args.seconds)
    holds = True
    if not args.skip_mixed:
        holds = bench_mixed(args.mixed_threads, args.rounds, args.seconds)
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
