"""Static int8 on a small BERT-style encoder with an additive attention mask (issue 15): the
sentence embeddings keep cosine >= 0.99 to float, on the interpreter and the cpu backend.

The design that makes it hold (quant/quantize.py), checked here on the quantized graph: only
Conv / MatMul / Gemm with constant weights are quantized, so the mask arithmetic (Where(mask,
0, -3.4e38) added to the scores), Softmax and the two activation x activation MatMuls stay
float, and the -3.4e38 never enters a calibrated range; dense results read in float (the head
reshapes, residual Adds, GELU) come from MatMulInteger dequantized, not requantized. Without it
(a min/max range over the masked scores, as ONNX Runtime's default static int8 takes), one
quantization step would be ~1e36 and every score would round to the same level."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.quant import cosine, get_schema

BATCH, SEQ, HIDDEN, HEADS, FFN, VOCAB, LAYERS = 2, 16, 32, 2, 64, 100, 2
MASK_VALUE = float(np.finfo(np.float32).min)


def small_bert():
    """input_ids, attention_mask [2, 16] int64 -> embeddings [2, 32] (masked mean pooling)."""
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def dense(x, fan_in, fan_out, name):
        w = const(f"{name}.w", (r.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32))
        b = const(f"{name}.b", (r.standard_normal(fan_out) * 0.1).astype(np.float32))
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), b], name)

    def layer_norm(x, name):
        scale = const(f"{name}.g", (1 + 0.1 * r.standard_normal(HIDDEN)).astype(np.float32))
        bias = const(f"{name}.beta", (0.1 * r.standard_normal(HIDDEN)).astype(np.float32))
        return node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-5)

    words = const("words", (r.standard_normal((VOCAB, HIDDEN)) * 0.5).astype(np.float32))
    positions = const("positions", (r.standard_normal((1, SEQ, HIDDEN)) * 0.2).astype(np.float32))
    x = layer_norm(node("Add", [node("Gather", [words, "input_ids"], "embed"), positions], "embed_pos"), "ln_embed")
    # The additive mask: 0 where attended, float32's lowest where padded, as [B, 1, 1, S].
    padded = node("Equal", ["attention_mask", const("zero_i", np.array(0, np.int64))], "padded")
    additive = node("Where", [padded, const("lowest", np.array(MASK_VALUE, np.float32)),
                              const("zero_f", np.array(0.0, np.float32))], "additive")
    mask4 = node("Unsqueeze", [additive, const("axes12", np.array([1, 2], np.int64))], "mask4")
    head = HIDDEN // HEADS
    split = const("split_shape", np.array([BATCH, SEQ, HEADS, head], np.int64))
    merge = const("merge_shape", np.array([BATCH, SEQ, HIDDEN], np.int64))
    for i in range(LAYERS):
        p = f"l{i}"

        def heads(v, perm, name, p=p):
            return node("Transpose", [node("Reshape", [v, split], f"{p}.{name}.r")], f"{p}.{name}.t", perm=perm)

        q = heads(dense(x, HIDDEN, HIDDEN, f"{p}.q"), [0, 2, 1, 3], "q")
        k = heads(dense(x, HIDDEN, HIDDEN, f"{p}.k"), [0, 2, 3, 1], "k")
        v = heads(dense(x, HIDDEN, HIDDEN, f"{p}.v"), [0, 2, 1, 3], "v")
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.qk"), const(f"{p}.scale", np.float32(head ** -0.5))],
                      f"{p}.scaled")
        probs = node("Softmax", [node("Add", [scores, mask4], f"{p}.masked")], f"{p}.probs", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"{p}.pv")], f"{p}.ctx.t", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge], f"{p}.ctx")
        x = layer_norm(node("Add", [x, dense(context, HIDDEN, HIDDEN, f"{p}.o")], f"{p}.res1"), f"{p}.ln1")
        f = dense(x, HIDDEN, FFN, f"{p}.ffn1")
        erf = node("Erf", [node("Div", [f, const(f"{p}.sqrt2", np.float32(np.sqrt(2)))], f"{p}.gd")], f"{p}.erf")
        gelu = node("Mul", [node("Mul", [f, node("Add", [erf, const(f"{p}.one", np.float32(1))], f"{p}.ge")],
                                 f"{p}.gm"), const(f"{p}.half", np.float32(0.5))], f"{p}.gelu")
        x = layer_norm(node("Add", [x, dense(gelu, FFN, HIDDEN, f"{p}.ffn2")], f"{p}.res2"), f"{p}.ln2")
    weights = node("Cast", [node("Unsqueeze", ["attention_mask", const("axis2", np.array([2], np.int64))],
                                 "mask3")], "maskf", to=TensorProto.FLOAT)
    axis1 = const("axis1", np.array([1], np.int64))
    summed = node("ReduceSum", [node("Mul", [x, weights], "weighted"), axis1], "summed", keepdims=0)
    nodes.append(helper.make_node("Div", [summed, node("ReduceSum", [weights, axis1], "count", keepdims=0)],
                                  ["embedding"], name="pool"))
    graph = helper.make_graph(
        nodes, "small_bert",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [BATCH, SEQ]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [BATCH, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def samples(count, seed):
    r = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        lengths = r.integers(4, SEQ + 1, BATCH)
        mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int64)
        feeds.append({"input_ids": r.integers(1, VOCAB, (BATCH, SEQ)) * mask, "attention_mask": mask})
    return feeds


@pytest.fixture(scope="module")
def bert():
    model = small_bert()
    calibration, held_out = samples(8, seed=0), samples(4, seed=1)
    return model, calibration, held_out, ember.profile(model, calibration)


def _row_cosines(reference, actual):
    return [cosine(a, b) for a, b in zip(reference, actual, strict=True)]


@pytest.mark.parametrize("backend, schema", [("interpreter", "asymmetric"), ("cpu", "asymmetric"),
                                             ("interpreter", "symmetric")])
def test_embeddings_keep_cosine_099_with_static_int8(bert, backend, schema):
    model, _, held_out, profile = bert
    floating = ember.compile(model, backend=backend)
    quantized = ember.compile(model, backend=backend, quantize=profile, quantize_options={"schema": schema})
    ops = quantized.stats["ops"]["optimized"]
    assert ops.get("MatMulInteger", 0) == 6 * LAYERS, ops  # q, k, v, o, ffn1, ffn2
    worst = min(c for feed in held_out
                for c in _row_cosines(floating.run(feed)["embedding"], quantized.run(feed)["embedding"]))
    assert worst >= 0.99, worst


def test_the_mask_arithmetic_and_softmax_stay_float_by_design(bert):
    model, _, _, profile = bert
    from ember.driver import load_model
    from ember.quant import quantize_graph

    graph = load_model(model)
    quantize_graph(graph, profile)
    quantized_inputs = {n.input(0).name for n in graph.nodes if n.op == "QuantizeLinear"}
    for node in graph.nodes:
        if node.op == "Softmax":
            masked = node.input(0).producer
            assert masked.op == "Add" and masked.name.endswith(".masked")
            assert all(v.producer is None or v.producer.op != "DequantizeLinear" for v in masked.inputs)
            assert masked.outputs[0].name not in quantized_inputs and node.outputs[0].name not in quantized_inputs
        if node.op == "MatMul":  # the two activation x activation products
            assert node.name.endswith((".qk", ".pv")), node.name
    # What a min/max range over the masked scores would do: one step ~1e36.
    masked = profile.tensors["l0.masked"]
    assert masked.min <= MASK_VALUE / 2
    scale, _ = get_schema("asymmetric").activation(masked.min, masked.max)
    assert scale > 1e35


def test_compile_stats_say_why_the_attention_products_stay_float(bert):
    model, _, _, profile = bert
    decisions = ember.compile(model, quantize=profile, backend="interpreter").stats["quantization"]
    assert decisions["l0.qk"] == decisions["l1.pv"] == \
        "float: its weight is not a constant (an activation x activation product)"
    assert decisions["l0.q.mm"] == "int8 (asymmetric), result float (read in float)"
