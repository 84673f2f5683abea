"""Models that carry ONNX Runtime's com.microsoft contrib ops, made the way users get them:
ONNX Runtime's transformer optimizer (onnxruntime.transformers.optimizer) over a BERT, its own
graph optimizer saved to a file, and its dynamic quantizer. Used by tests/test_contrib_ops.py
and bench/contrib_bert.py.

classic_bert builds a BERT encoder in the form HuggingFace transformers exported before its
SDPA attention (position ids sliced from a buffer, the mask as (1 - mask) * -10000, erf or
tanh Gelu), the form the optimizer's fusions recognize in full: EmbedLayerNormalization,
Attention, SkipLayerNormalization, BiasGelu and FastGelu."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper


def classic_bert(batch: int = 2, seq: int = 16, hidden: int = 64, heads: int = 4, layers: int = 2,
                 vocab: int = 100, intermediate: int = 128, seed: int = 0) -> ModelProto:
    """Inputs input_ids, attention_mask, token_type_ids (int64 [batch, seq]); output
    last_hidden_state. Even layers use the erf Gelu (fused to BiasGelu), odd ones the tanh
    form (FastGelu)."""
    rng = np.random.default_rng(seed)
    inits: list = []
    nodes: list = []

    def weight(name: str, *shape: int, scale: float = 0.05, offset: float = 0.0) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale + offset).astype(np.float32), name))
        return name

    def const(name: str, value, dtype=np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(op: str, inputs: list[str], output: str | None = None, **attrs) -> str:
        output = output or f"{op.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [output], name=f"{op}_{len(nodes)}", **attrs))
        return output

    def layer_norm(x: str, prefix: str, output: str | None = None) -> str:
        return node("LayerNormalization", [x, weight(prefix + "_g", hidden, scale=0.1, offset=1.0),
                                           weight(prefix + "_b", hidden)], output, axis=-1, epsilon=1e-12)

    # Embeddings: word + token type + position (ids 0..S-1 sliced from a [1, 512] buffer).
    seq_len = node("Gather", [node("Shape", ["input_ids"]), const("one_i64", 1, np.int64)], axis=0)
    seq_1d = node("Unsqueeze", [seq_len, const("axes_0", [0], np.int64)])
    position_ids = node("Slice", [const("position_ids", np.arange(512).reshape(1, 512), np.int64),
                                  const("start_0", [0], np.int64), seq_1d, const("axes_1", [1], np.int64),
                                  const("step_1", [1], np.int64)])
    word = node("Gather", [weight("word_embeddings", vocab, hidden), "input_ids"], axis=0)
    token = node("Gather", [weight("token_type_embeddings", 2, hidden), "token_type_ids"], axis=0)
    position = node("Gather", [weight("position_embeddings", 512, hidden), position_ids], axis=0)
    x = layer_norm(node("Add", [node("Add", [word, token]), position]), "embeddings_ln")
    # Extended attention mask [B, 1, 1, S]: 0 where attended, -10000 where not.
    mask = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", const("mask_axes_1", [1], np.int64)]),
                              const("mask_axes_2", [2], np.int64)])
    mask = node("Mul", [node("Sub", [const("one_f", 1.0), node("Cast", [mask], to=TensorProto.FLOAT)]),
                        const("mask_value", -10000.0)])
    head = hidden // heads
    for layer in range(layers):
        p = f"layer{layer}_"

        def dense(name: str, inputs: str, columns: int, rows: int = hidden, p: str = p) -> str:
            product = node("MatMul", [inputs, weight(p + name + "_w", rows, columns)])
            return node("Add", [product, weight(p + name + "_b", columns)])

        def heads_of(t: str, perm: list[int], p: str = p) -> str:
            split = node("Reshape", [t, const(p + f"split_{len(nodes)}", [0, 0, heads, head], np.int64)])
            return node("Transpose", [split], perm=perm)

        q = heads_of(dense("query", x, hidden), [0, 2, 1, 3])
        k = heads_of(dense("key", x, hidden), [0, 2, 3, 1])
        v = heads_of(dense("value", x, hidden), [0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k]), const(p + "sqrt_head", np.sqrt(head))])
        probs = node("Softmax", [node("Add", [scores, mask])], axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = node("Reshape", [context, const(p + "merge", [0, 0, hidden], np.int64)])
        x = layer_norm(node("Add", [dense("attention_output", context, hidden), x]), p + "attention_ln")
        h = dense("intermediate", x, intermediate)
        if layer % 2 == 0:  # 0.5 h (1 + erf(h / sqrt(2)))
            erf = node("Erf", [node("Div", [h, const(p + "sqrt2", np.sqrt(2.0))])])
            act = node("Mul", [node("Mul", [h, node("Add", [erf, const(p + "one", 1.0)])]), const(p + "half", 0.5)])
        else:  # 0.5 h (1 + tanh(sqrt(2 / pi) (h + 0.044715 h^3)))
            cubic = node("Mul", [node("Pow", [h, const(p + "three", 3.0)]), const(p + "cubic", 0.044715)])
            inner = node("Mul", [node("Add", [h, cubic]), const(p + "sqrt_2_pi", np.sqrt(2 / np.pi))])
            act = node("Mul", [node("Mul", [h, const(p + "half", 0.5)]),
                               node("Add", [node("Tanh", [inner]), const(p + "one", 1.0)])])
        out = dense("output", act, hidden, rows=intermediate)
        x = layer_norm(node("Add", [out, x]), p + "output_ln", "last_hidden_state" if layer == layers - 1 else None)
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, [batch, seq])
              for name in ("input_ids", "attention_mask", "token_type_ids")]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])]
    graph = helper.make_graph(nodes, "classic_bert", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bert_feeds(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids and token types; the first sequence is padded after 3/4 of its length."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq * 3 // 4:] = 0
    return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (batch, seq)).astype(np.int64)}


def transformer_optimized(source: Path, target: Path, num_heads: int, hidden_size: int) -> Path:
    """ONNX Runtime's transformer optimizer (its Python fusions only: opt_level 0, as levels
    above need PyTorch installed) over a BERT model."""
    from onnxruntime.transformers import optimizer  # noqa: PLC0415  (optional dependency)

    optimized = optimizer.optimize_model(str(source), model_type="bert", num_heads=num_heads,
                                         hidden_size=hidden_size, opt_level=0)
    optimized.save_model_to_file(str(target))
    return target


def runtime_optimized(source: Path, target: Path) -> Path:
    """ONNX Runtime's own graph optimizer (extended level: Gelu, SkipLayerNormalization,
    FusedMatMul, the quantized MatMul fusions...) with the result saved to `target`."""
    import onnxruntime as ort  # noqa: PLC0415

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return target


def op_counts(path: Path) -> collections.Counter:
    """(domain, op type) -> number of nodes."""
    import onnx  # noqa: PLC0415

    return collections.Counter((n.domain or "", n.op_type) for n in onnx.load(str(path)).graph.node)
