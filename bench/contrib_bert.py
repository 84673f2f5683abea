"""Ember cpu vs ONNX Runtime on BERT models that carry ONNX Runtime's com.microsoft contrib ops,
made as users make them: the shared bert_synthetic (4 layers, hidden 256, 4 heads, sequence
128) through onnxruntime.transformers' optimizer (SkipLayerNormalization, BiasGelu) and through
ONNX Runtime's own graph optimizer (Gelu, SkipLayerNormalization, FusedMatMul), quantized by
quantize_dynamic and fused by ONNX Runtime (MatMulIntegerToFloat, DynamicQuantizeMatMul), and a BERT of
the same size in the export form the transformer optimizer fuses completely (plus
EmbedLayerNormalization and Attention), with the unoptimized models for reference.

Both engines run side by side in their own processes, taking turns in short blocks
(ember.bench.compare); ONNX Runtime runs with its default (full) graph optimization, Ember
with its own pipeline. Prints the CPU, the median latencies and the median Ember / ONNX
Runtime ratio of adjacent blocks with its quartiles.

    python bench/contrib_bert.py [--threads 1] [--rounds 15] [--seconds 0.3] [--models a,b]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tests package (the model builders)

from ember.bench import compare  # noqa: E402
from ember.support.host import cpu_name  # noqa: E402
from tests.contrib_models import (  # noqa: E402
    bert_feeds,
    classic_bert,
    op_counts,
    runtime_optimized,
    transformer_optimized,
)

SHARED = REPO.parent / "shared" / "models"
MODELS = ("bert_synthetic", "bert_synthetic+transformers", "bert_synthetic+ort", "bert_synthetic+quantized",
          "classic_bert", "classic_bert+transformers")




def build(name: str, folder: Path) -> Path:
    """The model `name` in `folder`, with its inputs beside it (NAME.ref.npz, which
    ember.bench reads as in_<input>)."""
    import onnx

    base = name.split("+")[0]
    if base == "bert_synthetic":
        if not SHARED.is_dir():
            raise SystemExit(f"{SHARED} not found: the shared models are needed for {name}")
        source = SHARED / "bert_synthetic.onnx"
        feeds = {k: v for k, v in np.load(SHARED / "bert_synthetic.ref.npz").items() if k.startswith("in_")}
    else:
        source = folder / "classic_bert.onnx"
        if not source.exists():
            onnx.save(classic_bert(batch=1, seq=128, hidden=256, heads=4, layers=4, vocab=1000,
                                   intermediate=1024), source)
        feeds = {f"in_{k}": v for k, v in bert_feeds(1, 128, vocab=1000).items()}
    path = folder / f"{name.replace('+', '_')}.onnx"
    if name.endswith("+transformers"):
        transformer_optimized(source, path, num_heads=4, hidden_size=256)
    elif name.endswith("+ort"):
        runtime_optimized(source, path)
    elif name.endswith("+quantized"):  # quantize_dynamic, then ONNX Runtime's fusions (MatMulIntegerToFloat...)
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantized = folder / f"{base}_q.onnx"
        quantize_dynamic(source, quantized, weight_type=QuantType.QInt8)
        runtime_optimized(quantized, path)
    else:
        path.write_bytes(source.read_bytes())
    np.savez(path.with_suffix(".ref.npz"), **feeds)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", default="1")
    parser.add_argument("--rounds", type=int, default=15, help="timing blocks per engine")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timing block")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}")
    print(f"{'model':28s} {'threads':>7s} {'ember ms':>9s} {'ort ms':>9s} {'ratio':>6s}  {'[q1, q3]':14s} contrib ops")
    with tempfile.TemporaryDirectory(prefix="contrib-bert-") as tmp:
        for name in args.models.split(","):
            path = build(name, Path(tmp))
            contrib = ", ".join(f"{op} {n}" for (domain, op), n in sorted(op_counts(path).items())
                                if domain == "com.microsoft") or "-"
            for threads in (int(t) for t in args.threads.split(",")):
                r = compare(str(path), threads, rounds=args.rounds, seconds=args.seconds, fresh_cache=False)
                print(f"{name:28s} {threads:7d} {r['ember'] * 1e3:9.3f} {r['onnxruntime'] * 1e3:9.3f} "
                      f"{r['ratio']:6.2f}  [{r['ratio_q1']:.2f}, {r['ratio_q3']:.2f}]   {contrib}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
