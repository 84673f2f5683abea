"""Ember cpu vs ONNX Runtime and OpenVINO on the shared models and a 1024x1024x1024 GEMM with
constant weights, at 1 and 2 threads. Each engine runs in its own long-lived process and they
take turns in short timing blocks (see ember/bench.py); prints per engine the median (p50)
and 99th-percentile latency, the median Ember/ONNX Runtime ratio of adjacent blocks with its
quartiles, the median ratio of Ember to the best (fastest in that round) of the peers,
GFLOP/s where the FLOP count is known, and compile times (from an empty cache, and cached).

OpenVINO runs as a latency-minded user sets it up: PERFORMANCE_HINT=LATENCY, one stream,
INFERENCE_NUM_THREADS=N, INFERENCE_PRECISION_HINT=f32 (its default on a CPU with bf16
instructions would be bf16). It is left out, with a note, where `openvino` is not installed
(`pip install -e '.[bench]'`).

--load N runs N competing busy processes (normal priority) during the timed blocks.
--rss prints, instead of latencies, each engine's process peak RSS per model, measured in a
fresh process (load or compile, then a few runs).

    python bench/compare.py [--models mlp,resnet18,...|DIR] [--threads 1,2] [--rounds 15] [--seconds 0.3]
                            [--peers onnxruntime,openvino] [--load N] [--rss] [--cached] [--tune]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np

from ember.bench import compare, peak_rss
from ember.support.host import cpu_name

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"
DEFAULT_MODELS = "mlp,resnet18,mobilenetv2,bert_synthetic,gru,gemm1024"
# Multiply-accumulates x 2 (ResNet-18 and MobileNetV2 from their papers; GEMM exact).
GFLOP = {"resnet18": 3.63, "mobilenetv2": 0.60, "gemm1024": 2.0 * 1024 ** 3 / 1e9}
SHORT = {"onnxruntime": "ort", "openvino": "ov"}


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


# Real pretrained models from PyPI wheels (no download at run time; tests/pretrained_models.py
# names the wheels .ci/run installs): a sentence encoder and OCR networks. Each runs with
# realistic inputs at the shapes given, which every engine compiles for.
PRETRAINED = ("minilm", "rapidocr_rec", "rapidocr_det", "rapidocr_cls")
MINILM_SEQ = 128


def pretrained_model(name: str, scratch: Path) -> tuple[Path, dict[str, tuple[int, ...]], dict[str, np.ndarray]] | None:
    """(model file, input shapes, inputs) of a pretrained model, or None where its wheel is
    not installed."""
    repo = str(Path(__file__).resolve().parents[1])  # tests/ and bench/ as packages
    if repo not in sys.path:
        sys.path.insert(0, repo)
    if name == "minilm":
        import onnx

        from bench.quant_bert import minilm_path, token_samples

        path = minilm_path()
        if path is None:
            return None
        inputs = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]
        feeds = token_samples(1, MINILM_SEQ, 30522, inputs, seed=0)[0]
        return path, {k: v.shape for k, v in feeds.items()}, feeds
    from tests.pretrained_models import MODELS

    model = next(m for m in MODELS if m.name == name)
    path = model.path()
    if path is None:
        return None
    if model.fixups:
        import onnx

        path = scratch / f"{name}.onnx"
        onnx.save(model.proto(), path)
    feeds = {k: np.asarray(v) for k, v in dict(model.make_inputs()).items()}
    return path, dict(model.input_shapes) or {k: v.shape for k, v in feeds.items()}, feeds


def find_models(spec: str, scratch: Path, pretrained: dict[str, tuple[dict, dict]] | None = None) -> dict[str, Path]:
    """Model name -> path for a comma list of: a folder (each .onnx in it), an .onnx file,
    gemm1024 (generated), a pretrained model (PRETRAINED: its input shapes and inputs go to
    `pretrained`) or a name of the shared models folder."""
    paths: dict[str, Path] = {}
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        candidate = Path(item)
        if item in PRETRAINED:
            found = pretrained_model(item, scratch)
            if found is None:
                print(f"skipping {item}: its wheel is not installed (see tests/pretrained_models.py)", file=sys.stderr)
                continue
            paths[item], shapes, feeds = found
            if pretrained is not None:
                pretrained[item] = (shapes, feeds)
            continue
        if candidate.is_dir():
            found = sorted(candidate.glob("*.onnx"))
            if not found:
                print(f"no .onnx files in {candidate}", file=sys.stderr)
            paths.update({p.stem: p for p in found})
        elif candidate.suffix == ".onnx":
            paths[candidate.stem] = candidate
        elif item == "gemm1024":
            paths[item] = gemm_model(scratch)
        else:
            paths[item] = SHARED / f"{item}.onnx"
        for name in [n for n, p in paths.items() if not p.exists()]:
            print(f"skipping {name}: {paths[name]} not found (point --models at a folder of .onnx files)",
                  file=sys.stderr)
            del paths[name]
    return paths


def available_peers(spec: str) -> list[str]:
    peers = []
    for engine in (e.strip() for e in spec.split(",") if e.strip()):
        if engine not in SHORT:
            raise SystemExit(f"unknown peer {engine!r}: choose from {', '.join(SHORT)}")
        if importlib.util.find_spec(engine) is None:
            print(f"leaving out {engine}: not installed (pip install -e '.[bench]')", file=sys.stderr)
            continue
        peers.append(engine)
    return sorted(peers, key=lambda e: e != "onnxruntime")  # first: compare()'s "ratio" is to ONNX Runtime




def latency_table(paths: dict[str, Path], peers: list[str], threads: list[int], args: argparse.Namespace,
                  pretrained: dict[str, tuple[dict, dict]]) -> None:
    engines = ("ember", *peers)
    header = f"{'model':16} {'thr':>3} {'load':>4} " + " ".join(
        f"{SHORT.get(e, e) + ' p50':>9} {SHORT.get(e, e) + ' p99':>9}" for e in engines)
    ratios = f" {'e/ort':>5} {'(q1-q3)':>11}" if "onnxruntime" in peers else ""
    if peers:
        ratios += f" {'e/best':>6} {'(q1-q3)':>11}"
    print(header + ratios + f" {'GFLOP/s':>8} {'compile s':>9} {'cached s':>8}   (times in ms)")
    for thread_count in threads:
        for name, path in paths.items():
            shapes, feeds = pretrained.get(name, (None, None))
            r = compare(str(path), thread_count, rounds=args.rounds, seconds=args.seconds, engines=engines,
                        load=args.load, fresh_cache=not args.cached, input_shapes=shapes, feeds=feeds,
                        tune=args.tune)
            line = f"{name:16} {thread_count:>3} {args.load:>4} " + " ".join(
                f"{r['p50'][e] * 1e3:>9.3f} {r['p99'][e] * 1e3:>9.3f}" for e in engines)
            if "onnxruntime" in peers:
                line += f" {r['ratio']:>5.2f} {r['ratio_q1']:>5.2f}-{r['ratio_q3']:<5.2f}"
            if peers:
                line += f" {r['best_ratio']:>6.2f} {r['best_ratio_q1']:>5.2f}-{r['best_ratio_q3']:<5.2f}"
            gflops = f"{GFLOP[name] / r['ember']:.1f}" if name in GFLOP else "-"
            print(line + f" {gflops:>8} {r['compile_first']:>9.2f} {r['compile_cached']:>8.2f}", flush=True)


def rss_table(paths: dict[str, Path], peers: list[str], threads: list[int],
              pretrained: dict[str, tuple[dict, dict]]) -> None:
    engines = ("ember", *peers)
    print(f"{'model':16} {'thr':>3} " + " ".join(f"{SHORT.get(e, e) + ' MB':>9}" for e in engines)
          + (f" {'e/ort':>6}" if "onnxruntime" in peers else "") + "   (process peak RSS, fresh process each)")
    with tempfile.TemporaryDirectory(prefix="ember-rss-cache-") as cache:
        for thread_count in threads:
            for name, path in paths.items():
                shapes, feeds = pretrained.get(name, (None, None))
                options = {"cache_dir": cache, "input_shapes": shapes, "feeds": feeds}
                peak_rss("ember", str(path), thread_count, **options)  # fills the cache: compiles cached
                rss = {e: peak_rss(e, str(path), thread_count, **options) for e in engines}
                line = f"{name:16} {thread_count:>3} " + " ".join(f"{rss[e] / 2 ** 20:>9.1f}" for e in engines)
                if "onnxruntime" in peers:
                    line += f" {rss['ember'] / rss['onnxruntime']:>6.2f}"
                print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help="comma list of shared model names, .onnx files, folders of .onnx files, gemm1024, "
                             f"pretrained models from wheels ({', '.join(PRETRAINED)})")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=15, help="timing blocks per engine")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timing block")
    parser.add_argument("--peers", default="onnxruntime,openvino", help="engines to time beside Ember")
    parser.add_argument("--load", type=int, default=0, help="competing busy processes during the measurement")
    parser.add_argument("--rss", action="store_true", help="print each engine's peak RSS instead of latencies")
    parser.add_argument("--tune", action="store_true",
                        help="Ember compiles with tune=True (kernels measured on this machine, cached per CPU)")
    parser.add_argument("--cached", action="store_true",
                        help="compile from the user's cache (skips the cold kernel-library build per model)")
    args = parser.parse_args()
    if args.load < 0:
        parser.error("--load takes a count of busy processes (0 or more)")
    peers = available_peers(args.peers)
    threads = [int(t) for t in args.threads.split(",")]
    print(f"# {cpu_name()}; {', '.join(('ember', *peers))}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        pretrained: dict[str, tuple[dict, dict]] = {}
        paths = find_models(args.models, Path(tmp), pretrained)
        if not paths:
            print("no models to measure", file=sys.stderr)
            return 1
        if args.rss:
            rss_table(paths, peers, threads, pretrained)
        else:
            latency_table(paths, peers, threads, args, pretrained)
    return 0


if __name__ == "__main__":
    sys.exit(main())
