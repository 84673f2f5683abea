"""Accuracy of Ember's post-training int8 quantization on real data (issue 15): a small
classifier trained here in NumPy on scikit-learn's bundled digits (8x8 images, no network
needed), exported to ONNX with onnx.helper, profiled on training images, compiled with
quantize=profile in every schema (asymmetric, symmetric, symmetric-uint8, power2: int8 per-channel
weights, Conv/Gemm as integer ops on the cpu backend) and calibration method (minmax, percentile,
entropy), and scored against the float model on the held-out test split.

    python bench/quant_accuracy.py [--backend cpu] [--schema all|asymmetric|...] [--method all|minmax|...]

The model: Conv 3x3 (1->8, pad 1), Relu, Conv 3x3 stride 2 (8->16), Relu, Flatten, Gemm
(256->64), Relu, Gemm (64->10); trained with plain minibatch SGD with momentum."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

import ember


def _im2col(x, k, stride, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = np.empty((n, c, k, k, oh, ow), x.dtype)
    for u in range(k):
        for v in range(k):
            cols[:, :, u, v] = xp[:, :, u:u + stride * oh:stride, v:v + stride * ow:stride]
    return cols.reshape(n, c * k * k, oh * ow), (oh, ow)


def _col2im(cols, shape, k, stride, pad, out_hw):
    n, c, h, w = shape
    oh, ow = out_hw
    cols = cols.reshape(n, c, k, k, oh, ow)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for u in range(k):
        for v in range(k):
            xp[:, :, u:u + stride * oh:stride, v:v + stride * ow:stride] += cols[:, :, u, v]
    return xp[:, :, pad:pad + h, pad:pad + w]


LAYERS = [("conv", 1, 8, 1), ("conv", 8, 16, 2)]


def init(rng):
    p = {}
    for i, (_, cin, cout, _s) in enumerate(LAYERS):
        p[f"w{i}"] = rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (cin * 9))
        p[f"b{i}"] = np.zeros(cout)
    p["w2"], p["b2"] = rng.standard_normal((64, 256)) * np.sqrt(2 / 256), np.zeros(64)
    p["w3"], p["b3"] = rng.standard_normal((10, 64)) * np.sqrt(2 / 64), np.zeros(10)
    return p


def forward(p, x, keep=False):
    cache, h = [], x
    for i, (_, _cin, cout, stride) in enumerate(LAYERS):
        cols, hw = _im2col(h, 3, stride, 1)
        z = np.einsum("ok,nkp->nop", p[f"w{i}"].reshape(cout, -1), cols) + p[f"b{i}"][:, None]
        cache.append((h.shape, cols, hw, z))
        h = np.maximum(z, 0).reshape(h.shape[0], cout, *hw)
    f = h.reshape(h.shape[0], -1)
    z2 = f @ p["w2"].T + p["b2"]
    a2 = np.maximum(z2, 0)
    logits = a2 @ p["w3"].T + p["b3"]
    return (logits, cache, f, z2, a2) if keep else logits


def train(p, x, y, epochs=30, lr=0.05, seed=0):
    rng = np.random.default_rng(seed)
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), 32):
            idx = order[start:start + 32]
            logits, cache, f, z2, a2 = forward(p, x[idx], keep=True)
            prob = np.exp(logits - logits.max(1, keepdims=True))
            prob /= prob.sum(1, keepdims=True)
            d = prob
            d[np.arange(len(idx)), y[idx]] -= 1
            d /= len(idx)
            g = {"w3": d.T @ a2, "b3": d.sum(0)}
            d2 = (d @ p["w3"]) * (z2 > 0)
            g["w2"], g["b2"] = d2.T @ f, d2.sum(0)
            dh = (d2 @ p["w2"]).reshape(len(idx), 16, -1)
            for i in reversed(range(len(LAYERS))):
                shape, cols, hw, z = cache[i]
                cout = LAYERS[i][2]
                dz = dh.reshape(z.shape) * (z > 0)
                g[f"w{i}"] = np.einsum("nop,nkp->ok", dz, cols).reshape(p[f"w{i}"].shape)
                g[f"b{i}"] = dz.sum((0, 2))
                if i:
                    dcols = np.einsum("ok,nop->nkp", p[f"w{i}"].reshape(cout, -1), dz)
                    dh = _col2im(dcols, shape, 3, LAYERS[i][3], 1, hw)
            for k in p:
                vel[k] = 0.9 * vel[k] - lr * g[k]
                p[k] += vel[k]
    return p


def export(p, path, batch):
    from onnx import TensorProto, helper, numpy_helper, save

    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in p.items()]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Flatten", ["r1"], ["f"]),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["z2"], transB=1),
             helper.make_node("Relu", ["z2"], ["a2"]),
             helper.make_node("Gemm", ["a2", "w3", "b3"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "digits_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [batch, 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--method", default="all", choices=["all", *ember.quant.METHODS])
    ap.add_argument("--schema", default="all", choices=["all", *ember.quant.SCHEMAS])
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args(argv)
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float64)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.3, random_state=0,
                                                        stratify=digits.target)
    params = train(init(np.random.default_rng(0)), x_train, y_train, epochs=args.epochs)
    batch = len(x_test)
    schemas = list(ember.quant.SCHEMAS) if args.schema == "all" else [args.schema]
    methods = list(ember.quant.METHODS) if args.method == "all" else [args.method]
    test = {"x": x_test.astype(np.float32)}
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "digits.onnx")
        export(params, path, batch)
        feeds = [{"x": x_train[:batch].astype(np.float32)}]  # one batch of training images
        profile = ember.profile(path, feeds)
        floating = ember.compile(path, backend=args.backend)
        lf = floating.run(test)["logits"]
        acc_f = float(np.mean(lf.argmax(1) == y_test)) * 100
        print(f"digits CNN, {len(x_train)} train / {batch} test images, backend {args.backend}, calibration on "
              f"{batch} training images; float test accuracy {acc_f:.2f}%")
        print(f"  {'schema':16s} {'method':10s} {'int8 acc':>9s} {'loss':>7s} {'top-1 agr':>9s} {'max|dlogit|':>11s}"
              f"  integer ops")
        for schema in schemas:
            for method in methods:
                quantized = ember.compile(path, backend=args.backend, quantize=profile,
                                          quantize_options={"method": method, "schema": schema})
                lq = quantized.run(test)["logits"]
                acc_q = float(np.mean(lq.argmax(1) == y_test)) * 100
                (logits,) = ember.quant.compare_outputs([{"logits": lf}], [{"logits": lq}]).outputs
                assert logits.top1_agreement is not None
                ops = {k: v for k, v in sorted(quantized.stats["ops"]["optimized"].items())
                       if k in ("QLinearConv", "QLinearMatMul", "MatMulInteger", "Conv", "Gemm", "FullyConnected")}
                print(f"  {schema:16s} {method:10s} {acc_q:8.2f}% {acc_f - acc_q:+7.2f} "
                      f"{100 * logits.top1_agreement:8.2f}% {logits.max_abs_error:11.4f}  {ops}")
                worst = max(worst, acc_f - acc_q)
    print(f"  max |logit| {np.abs(lf).max():.2f}; worst loss {worst:+.2f} points (goal < 0.5)")
    return 0 if worst < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
