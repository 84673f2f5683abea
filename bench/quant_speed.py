"""int8 speed of the cpu backend (issue 15): Ember fp32, Ember int8 (calibrated here with
ember.profile), ONNX Runtime fp32 and ONNX Runtime int8 (its own quantize_static: QDQ format,
per-channel, uint8 activations, int8 weights, after its recommended quant_pre_process), side by
side on the shared models. Each engine lives in its own process; they take turns in short
timing blocks, in rotating order, for `--rounds` rounds (like bench/compare.py), so every ratio
is the median of per-round ratios taken under the same load. Also prints what int8 costs in
accuracy against each engine's own float model (max abs error relative to the float output's
largest magnitude, cosine) on the reference input and on a held-out random one.

    python bench/quant_speed.py [--models resnet18,mobilenetv2,bert_synthetic] [--threads 1]
                                [--rounds 15] [--seconds 0.3]

Calibration: the model's reference input plus 7 seeded variants of it (standard normal floats;
integer inputs permuted along their last axis), the same feeds for both quantizers."""
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
ENGINES = ("ember_fp32", "ember_int8", "ort_fp32", "ort_int8")




def reference_feeds(model: Path) -> dict[str, np.ndarray]:
    ref = np.load(model.with_suffix(".ref.npz"))
    return {k[3:]: ref[k] for k in ref.files if k.startswith("in_")}


def variant(feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Standard normal floats; integer inputs (token ids, masks) permuted along their last axis."""
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else rng.permutation(v, axis=-1)
            for k, v in feeds.items()}


def calibration_feeds(model: Path) -> list[dict[str, np.ndarray]]:
    base = reference_feeds(model)
    return [base] + [variant(base, seed) for seed in range(1, 8)]


def prepare(model: Path, folder: Path) -> tuple[Path, Path]:
    """The Ember profile and ONNX Runtime's QDQ model, both calibrated on the same feeds."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    import ember

    feeds = calibration_feeds(model)
    profile = folder / f"{model.stem}.profile.json"
    ember.profile(str(model), feeds).save(profile)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self):
            return next(self.items, None)

    pre = folder / f"{model.stem}.pre.onnx"
    quant_pre_process(str(model), str(pre))
    qdq = folder / f"{model.stem}.qdq.onnx"
    quantize_static(str(pre), str(qdq), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return profile, qdq


def load(engine: str, model: str, threads: int, profile: str, qdq: str):
    """A callable running `engine` on feeds, and the feeds' keys it takes."""
    if engine.startswith("ember"):
        import ember

        compiled = ember.compile(model, backend="cpu", num_threads=threads,
                                 quantize=profile if engine == "ember_int8" else None)
        def run(feeds):
            outputs = compiled.run(feeds)
            return [outputs[name] for name in compiled.output_names]

        return run
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(qdq if engine == "ort_int8" else model, options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def serve(engine: str, model: str, threads: int, profile: str, qdq: str) -> None:
    """In a child process: one engine; answers {"seconds": s} with {"times": [...]} and
    {"outputs": file.npz} with the outputs for the feeds in that file."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    run = load(engine, model, threads, profile, qdq)
    feeds = reference_feeds(Path(model))
    for _ in range(3):
        run(feeds)
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        if "outputs" in request:
            held = dict(np.load(request["outputs"]))
            np.savez(request["outputs"] + ".out.npz", *run(held))
            protocol.write(json.dumps({"done": True}) + "\n")
        else:
            times: list[float] = []
            start = time.perf_counter()
            while len(times) < 3 or time.perf_counter() - start < float(request["seconds"]):
                t0 = time.perf_counter()
                run(feeds)
                times.append(time.perf_counter() - t0)
            protocol.write(json.dumps({"times": times}) + "\n")
        protocol.flush()


class Worker:
    def __init__(self, engine: str, model: Path, threads: int, profile: Path, qdq: Path) -> None:
        self.engine = engine
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", engine, str(model), str(threads), str(profile), str(qdq)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ask(None)

    def ask(self, request: dict | None) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        if request is not None:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.engine} failed (see its stderr above)")
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def accuracy(workers: dict[str, Worker], model: Path, folder: Path) -> list[str]:
    """int8 against float, per engine, on the reference input and a held-out random input."""
    lines = []
    for label, feeds in (("reference", reference_feeds(model)), ("held-out", variant(reference_feeds(model), 99))):
        path = folder / f"{model.stem}.{label}.npz"
        np.savez(path, **feeds)
        outs = {}
        for engine, worker in workers.items():
            worker.ask({"outputs": str(path)})
            data = np.load(str(path) + ".out.npz")
            outs[engine] = [data[k] for k in sorted(data.files, key=lambda s: int(s.split("_")[1]))]
        for who in ("ember", "ort"):
            for i, (f, q) in enumerate(zip(outs[f"{who}_fp32"], outs[f"{who}_int8"], strict=True)):
                f64, q64 = f.astype(np.float64).ravel(), q.astype(np.float64).ravel()
                scale = np.abs(f64).max() or 1.0
                cos = float(f64 @ q64 / (np.linalg.norm(f64) * np.linalg.norm(q64) or 1.0))
                err = np.abs(f64 - q64).max()
                lines.append(f"  {who:5} int8 vs fp32, output {i}, {label:9}: max abs err {err:.4g} "
                             f"({err / scale:.3%} of max |fp32|), cosine {cos:.5f}")
    return lines


def bench(model: Path, threads: int, rounds: int, seconds: float, folder: Path) -> None:
    profile, qdq = prepare(model, folder)
    workers = {e: Worker(e, model, threads, profile, qdq) for e in ENGINES}
    medians: dict[str, list[float]] = {e: [] for e in ENGINES}
    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    try:
        order = list(ENGINES)
        for r in range(rounds):
            for engine in (order[r % 4:] + order[:r % 4])[::(1 if r % 2 == 0 else -1)]:
                block = workers[engine].ask({"seconds": seconds})["times"]
                times[engine] += block
                medians[engine].append(statistics.median(block))
                time.sleep(0.05)
        lines = accuracy(workers, model, folder)
    finally:
        for w in workers.values():
            w.close()

    def ratio(a: str, b: str) -> str:
        rs = sorted(x / y for x, y in zip(medians[a], medians[b], strict=True))
        q = statistics.quantiles(rs, n=4) if len(rs) > 1 else [rs[0]] * 3
        return f"{statistics.median(rs):.2f} ({q[0]:.2f}-{q[2]:.2f})"

    ms = {e: statistics.median(times[e]) * 1e3 for e in ENGINES}
    print(f"{model.stem} ({threads} thread{'s' if threads > 1 else ''}): " +
          ", ".join(f"{e} {ms[e]:.3f} ms" for e in ENGINES))
    print(f"  Ember int8 speed-up over Ember fp32 (fp32/int8): {ratio('ember_fp32', 'ember_int8')}")
    print(f"  Ember int8 / ONNX Runtime int8 (time):          {ratio('ember_int8', 'ort_int8')}")
    print(f"  Ember int8 / ONNX Runtime fp32 (time):          {ratio('ember_int8', 'ort_fp32')}")
    print(f"  ONNX Runtime speed-up int8 over fp32:           {ratio('ort_fp32', 'ort_int8')}")
    print("\n".join(lines), flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        engine, model, threads, profile, qdq = sys.argv[2:7]
        serve(engine, model, int(threads), profile, qdq)
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert_synthetic")
    parser.add_argument("--threads", default="1", help="comma-separated thread counts (e.g. 1,2)")
    parser.add_argument("--rounds", type=int, default=15, help="timing blocks per engine")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timing block")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical cores; ratios are medians of per-round ratios (quartiles)")
    with tempfile.TemporaryDirectory(prefix="ember-quant-speed-") as tmp:
        for threads in (int(t) for t in args.threads.split(",")):
            for name in args.models.split(","):
                model = SHARED / f"{name}.onnx"
                if not model.exists():
                    print(f"skipping {name}: {model} not found", file=sys.stderr)
                    continue
                bench(model, threads, args.rounds, args.seconds, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
