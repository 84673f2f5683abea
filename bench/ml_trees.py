"""Tree ensembles from scikit-learn (trained on its bundled digits data, exported with skl2onnx)
on Ember's cpu backend against ONNX Runtime, both at the same thread count (1 by default) in
one process, timed in alternating rounds so machine load hits both alike. Prints per model
and batch: Ember's compile time, both medians, the median per-round ratio Ember / ONNX Runtime
(below 1: Ember is faster) and the largest difference of Ember's scores from ONNX Runtime's.

    python bench/ml_trees.py [--threads 1] [--rounds 15] [--batches 1,64,1797] [--trees 100]

Needs scikit-learn, skl2onnx and onnxruntime (the `test` extra).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from single_op import cpu_name, interleaved


def models(trees: int) -> dict:
    """name -> (fitted estimator, its ONNX model) for the forests benchmarked."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_digits
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    fitted = {
        "RandomForestClassifier": RandomForestClassifier(n_estimators=trees, random_state=0, n_jobs=1).fit(x, y),
        "RandomForestRegressor": RandomForestRegressor(n_estimators=trees, max_depth=12, random_state=0,
                                                       n_jobs=1).fit(x, y),
        "GradientBoostingRegressor": GradientBoostingRegressor(n_estimators=trees, random_state=0).fit(x, y),
    }
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, model in fitted.items():
            options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
            out[name] = (model, to_onnx(model, x[:1], options=options))
    return out



def compare(name: str, model, batch: int, threads: int, rounds: int) -> str:
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    from ember.backends.cpu import CpuBackend
    from ember.driver import compile_model

    x = load_digits().data.astype(np.float32)
    rows = np.resize(x, (batch, x.shape[1])).astype(np.float32)
    input_name = model.graph.input[0].name
    started = time.perf_counter()
    ember = compile_model(model, backend=CpuBackend(num_threads=threads), input_shapes={input_name: rows.shape})
    compile_seconds = time.perf_counter() - started
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {input_name: rows}
    runs = {"ember": lambda: ember.run(feeds), "ort": lambda: session.run(None, feeds)}
    ours = ember.run(feeds)
    theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    diff = max(float(np.max(np.abs(ours[k].astype(np.float64) - v.astype(np.float64)))) for k, v in theirs.items())
    medians, ratio = interleaved(runs, rounds)
    return (f"{name:>26} {batch:>6} {compile_seconds:9.2f} {medians['ember'] * 1e3:10.3f} "
            f"{medians['ort'] * 1e3:10.3f} {ratio:6.2f} {diff:9.1e}")


def main() -> int:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batches", default="1,64,1797")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--models", default="", help="comma-separated subset of the model names")
    args = parser.parse_args()
    print(f"cpu: {cpu_name()}; threads: {args.threads}; trees: {args.trees}; onnxruntime {ort.__version__}")
    print(f"{'model':>26} {'batch':>6} {'compile s':>9} {'ember ms':>10} {'ort ms':>10} {'ratio':>6} {'max diff':>9}")
    chosen = set(args.models.split(",")) if args.models else None
    for name, (_, model) in models(args.trees).items():
        if chosen and name not in chosen:
            continue
        for batch in (int(b) for b in args.batches.split(",")):
            print(compare(name, model, batch, args.threads, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
