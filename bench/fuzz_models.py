"""Mutation fuzzing of Ember's model import, compile and run (issue 20, the robustness suite).

Seeds are the ONNX backend node test models (bench/onnx_node_data.py) and the small example
and shared models (examples/lenet.onnx, ../shared/models/{mlp,gru}.onnx). Each case copies a
seed and applies one to three mutations at the protobuf level: attribute values (ints to
0/-1/huge/odd, floats to nan/inf/huge, strings garbled or invalid UTF-8, lists shortened,
lengthened, repeated), attribute types, attributes dropped or added, tensor dims (0, 1, -1,
huge, symbolic, rank changed), element types flipped, node inputs dropped, duplicated or
rewired, node outputs renamed or clashing, nodes deleted, duplicated, reordered or changed
into another op, initializers truncated, NaN-filled, reshaped, retyped or moved to (hostile)
external data, run-time inputs made constant and constants made inputs, opsets and IR
versions changed, names made hostile (quotes, newlines, `*/`, `../`, 10,000 characters, C
keywords, names that sanitize to the same C identifier, invalid UTF-8), and input data given
NaN, infinities and out-of-range indices. Inputs are random (from the case's seed) unless
the seed's own data still fits. Everything is deterministic given --seed.

Each case runs in a long-lived worker process (restarted when it dies or hangs): the model
file is compiled and run by Ember (ember.onnx_backend.prepare, which binds inputs that must be
constants), then, where Ember accepted, by ONNX Runtime, and the results are compared. A case
ends as one of:

  refused       Ember raised an EmberError (a clean refusal)
  match         Ember and ONNX Runtime both ran it; the results agree
  ember-only    Ember ran it, ONNX Runtime refused it
  not-compared  both ran it, but its outputs are random (RandomNormal, Bernoulli, ...)
  ort-differs   both ran it, the results differ, and Ember's match ONNX's reference
                implementation (onnx.reference), the tie-break: ONNX Runtime's difference
  no-consensus  both ran it, the results differ, and the reference agrees with neither (listed
                with each result in the summary, to be looked at: no agreed answer to hold to)
  ort-crash, ort-timeout   ONNX Runtime died or hung on a model Ember ran (not Ember's)
and the findings (each an Ember bug):
  crash         the worker died (signal or exit) while Ember worked on the case
  hang          Ember ran past the time limit
  escape        Ember raised an exception that is not an EmberError
  internal      an EmberError that says it is an Ember bug ("internal error", "an Ember bug")
  mismatch      both ran it, the results differ beyond tolerance (shape, element type, NaN
                positions, infinities, or values past rtol/atol), and ONNX's reference
                agrees with ONNX Runtime (or fails on the model)

Each finding's model, side files and inputs (and those of ort-differs and no-consensus cases)
are saved under --out/<outcome>/<case>/ with an info.json; `--replay DIR` runs one saved case
in this process (no isolation) to debug it.

    python bench/fuzz_models.py --cases 10000 --backend interpreter|cpu [--seed 0] [--jobs 2]
                                [--timeout 60] [--out fuzz-findings] [--start 0]
    python bench/fuzz_models.py --replay fuzz-findings/escape/000123 --backend cpu

Workers run under a resource budget (EMBER_MAX_TENSOR_BYTES=256 MiB, EMBER_MAX_ARENA_BYTES=
1 GiB, EMBER_MAX_GRAPH_NODES=100000, address space 8 GiB), as a service embedding Ember
would; the cpu backend builds into its own cache folder (--cache-dir), pruned of model
libraries as the run goes."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

try:  # run as a script (bench/ on sys.path) or imported as bench.fuzz_models
    from onnx_node_data import NodeCase, generate, load_index, read_case
except ImportError:  # pragma: no cover
    from bench.onnx_node_data import NodeCase, generate, load_index, read_case

FINDINGS = ("crash", "hang", "escape", "internal", "mismatch")
OUTCOMES = ("refused", "match", "ember-only", "not-compared", "ort-differs", "no-consensus", "ort-crash", "ort-timeout",
            *FINDINGS)
# Not findings, but saved and listed for review: Ember differs from ONNX Runtime.
REVIEW = ("ort-differs", "no-consensus")
# An EmberError whose message says it is a bug of Ember's own.
INTERNAL_MARKERS = ("internal error", "an Ember bug")
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
WORKER_ENV = {"EMBER_MAX_TENSOR_BYTES": str(256 << 20), "EMBER_MAX_ARENA_BYTES": str(1 << 30),
              "EMBER_MAX_GRAPH_NODES": "100000", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
ADDRESS_SPACE = 8 << 30
INPUT_BYTES_CAP = 64 << 20
EXTRA_SEEDS = (REPO / "examples" / "lenet.onnx", REPO.parent / "shared" / "models" / "mlp.onnx",
               REPO.parent / "shared" / "models" / "gru.onnx")


# ---------------------------------------------------------------------------------------------
# Seeds


@dataclass
class Seed:
    name: str
    path: Path
    runs: bool  # Ember's interpreter passes the seed unmutated (tests/onnx_node_expected.py)
    rtol: float = 1e-3
    atol: float = 1e-5


def expected_failures() -> set[str]:
    sys.path.insert(0, str(REPO))
    try:
        from tests.onnx_node_expected import EXPECTED_FAILURES
    except ImportError:  # pragma: no cover
        return set()
    finally:
        sys.path.remove(str(REPO))
    return set(EXPECTED_FAILURES)


def load_seeds() -> list[Seed]:
    failing = expected_failures()
    seeds = [Seed(c.name, c.path, c.name not in failing) for c in load_index(generate())]
    seeds += [Seed(p.stem, p, True) for p in EXTRA_SEEDS if p.is_file()]
    return seeds


_SEED_CACHE: dict[str, tuple[ModelProto, dict[str, Any]]] = {}


def seed_model(seed: Seed) -> tuple[ModelProto, dict[str, Any]]:
    """The seed's model and its stored inputs by name (cached)."""
    if seed.name not in _SEED_CACHE:
        if seed.path.is_dir():
            model, values, _ = read_case(NodeCase(seed.name, "", "node", seed.path))
            folder = seed.path / "test_data_set_0"
            present = [vi for j, vi in enumerate(model.graph.input) if (folder / f"input_{j}.pb").exists()]
            inputs = {vi.name: v for vi, v in zip(present, values, strict=True)}
        else:
            model = onnx.load(str(seed.path))
            ref = seed.path.with_suffix(".ref.npz")
            inputs = {}
            if ref.is_file():
                with np.load(ref) as data:
                    inputs = {k[3:]: data[k] for k in data.files if k.startswith("in_")}
        if len(_SEED_CACHE) > 400:
            _SEED_CACHE.pop(next(iter(_SEED_CACHE)))
        _SEED_CACHE[seed.name] = (model, inputs)
    return _SEED_CACHE[seed.name]


# ---------------------------------------------------------------------------------------------
# Mutations: each takes the model (a private copy) and the case's random generator, changes
# the model in place and returns what it did, or None when it does not apply to this model.

SPECIAL_INTS = [0, -1, 1, 2, 3, -2, 5, 7, 64, 2**31 - 1, -2**31, 2**32, 2**62, 2**63 - 1, -2**63, 1 << 40]
SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e38, -1e38, 3.5e38, 1e-45, 1e-38, 1e30, -1.0, 0.5, 2.0]
ENUM_STRINGS = [b"NOTSET", b"SAME_UPPER", b"SAME_LOWER", b"VALID", b"linear", b"nearest", b"cubic", b"constant",
                b"reflect", b"edge", b"wrap", b"half_pixel", b"asymmetric", b"align_corners", b"pytorch_half_pixel",
                b"tf_crop_and_resize", b"floor", b"ceil", b"round_prefer_floor", b"round_prefer_ceil", b"mean",
                b"sum", b"max", b"min", b"none", b"add", b"mul", b"bidirectional", b"reverse", b"forward",
                b"Relu", b"Tanh", b"Sigmoid", b"HardSigmoid", b"tanh", b"DCR", b"CRD", b"LEFT", b"RIGHT",
                b"bilinear", b"zeros", b"border", b"reflection", b"avg", b"exclude_outside", b"i,j->ij",
                b"ij,jk->ik", b"...ii->...i", b"ii", b"i,i", b"->", b"", b"x", b"\xff\xfe\xfd", b"\x00", b"A" * 5000,
                b"bij,bjk->bik", b"ab,bc", b"a...,...b->ab"]
HOSTILE_NAMES = ['"', "'", 'a"b', "a'b", "\n", "a\nb", "a\r\nb", "*/", "/*", "*/ int x; /*", "// x", "../../etc/passwd",
                 "../x", "x" * 10000, " ", "a b", "\\", "a\\", "\t", "%s%n%x", "é", "名前", "\u202e", "0", "1abc",
                 "a-b", "a.b", "#define X", "??=", "${HOME}", "$(id)", "`id`", "int", "return", "main", "void",
                 "static", "if", "float", "NULL", "ember_run", "memcpy", "__attribute__", "a\x00b", "\x7f",
                 "\U0001f600", "<>&", "{}", "a;b", "[0]", "-1", "_", "__", "model", "weights", "arena", "in", "out",
                 "x0", "v0", "t0"]
OP_POOL = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round",
           "Sign", "Erf", "Not", "Identity", "Softmax", "LogSoftmax", "Hardmax", "Add", "Sub", "Mul", "Div", "Pow",
           "Max", "Min", "Mean", "Sum", "Equal", "Less", "Greater", "And", "Or", "Xor", "Mod", "BitShift",
           "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
           "GlobalMaxPool", "LpPool", "BatchNormalization", "InstanceNormalization", "LayerNormalization",
           "GroupNormalization", "LRN", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat",
           "Split", "Slice", "Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Expand",
           "Tile", "Pad", "Resize", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
           "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK", "Where",
           "Cast", "CastLike", "Clip", "Shape", "Size", "ConstantOfShape", "Range", "CumSum", "OneHot",
           "DepthToSpace", "SpaceToDepth", "Einsum", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
           "HardSwish", "Mish", "Softplus", "Softsign", "PRelu", "Gelu", "Trilu", "ReverseSequence", "IsNaN",
           "IsInf", "NonZero", "Unique", "Compress", "Dropout", "LSTM", "GRU", "RNN", "QuantizeLinear",
           "DequantizeLinear", "Det", "Shrink", "ThresholdedRelu", "Upsample", "GridSample", "RoiAlign",
           "NonMaxSuppression", "DFT", "STFT", "If", "Loop", "Scan", "Bogus", ""]
ATTR_POOL = ["axis", "axes", "keepdims", "perm", "alpha", "beta", "gamma", "mode", "pads", "strides", "kernel_shape",
             "dilations", "group", "to", "transA", "transB", "epsilon", "auto_pad", "ceil_mode", "largest", "sorted",
             "split", "value", "direction", "hidden_size", "blocksize", "exclusive", "reverse", "k",
             "noop_with_empty_axes", "storage_order", "count_include_pad", "select_last_index", "start", "end",
             "upper", "equation",
             "output_padding", "output_shape", "batch_dims", "reduction", "stash_type", "fmod", "seed"]
TENSOR_TYPES = [t for t in range(1, 27)] + [0, 99]
OPSETS = [1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 99, 0, -1,
          2**40]
INVALID_UTF8_MARK = b"\x7fFUZZUTF8\x7f"  # replaced after serialization by the same number of invalid bytes
INVALID_UTF8_BYTES = b"\xff\xfeFUZZU\xc3\x28\xe2\x82"


@dataclass
class Mutating:
    """What a mutation works on: the model (a private copy), the case's random generator, the
    known values of inputs (the seed's data, and initializers made inputs) and side files
    written next to the model (external data)."""

    model: ModelProto
    rng: random.Random
    feeds: dict[str, Any]
    side: dict[str, bytes] = field(default_factory=dict)


def graphs_of(graph: GraphProto) -> Iterator[GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from graphs_of(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from graphs_of(sub)


def all_nodes(model: ModelProto) -> list[tuple[GraphProto, NodeProto]]:
    return [(g, n) for g in graphs_of(model.graph) for n in g.node]


def value_names(graph: GraphProto) -> list[str]:
    names = [vi.name for vi in graph.input] + [t.name for t in graph.initializer]
    names += [o for n in graph.node for o in n.output if o]
    return list(dict.fromkeys(names))


def runtime_inputs(graph: GraphProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in inits]


def _pick(rng: random.Random, items: list) -> Any:
    return items[rng.randrange(len(items))] if items else None


def _special_int(rng: random.Random, current: int | None = None) -> int:
    choices = SPECIAL_INTS + ([current + 1, current - 1, -current, current * 2] if current is not None else [])
    return int(max(-2**63, min(2**63 - 1, _pick(rng, choices))))


def mut_attr_value(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    candidates = [(n, a) for _, n in all_nodes(model) for a in n.attribute
                  if a.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS)]
    if not candidates:
        return None
    node, attr = _pick(rng, candidates)
    before = helper.get_attribute_value(attr)
    if attr.type == AttributeProto.INT:
        attr.i = _special_int(rng, attr.i)
    elif attr.type == AttributeProto.FLOAT:
        attr.f = _pick(rng, SPECIAL_FLOATS + [attr.f * -1, attr.f * 1000])
    elif attr.type == AttributeProto.STRING:
        attr.s = _pick(rng, ENUM_STRINGS + [attr.s.upper(), attr.s + b"x", attr.s[:-1]])
    elif attr.type in (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS):
        field_name = {AttributeProto.INTS: "ints", AttributeProto.FLOATS: "floats", AttributeProto.STRINGS: "strings"}
        values = list(getattr(attr, field_name[attr.type]))
        how = rng.randrange(7)
        if how == 0 and values:
            del values[rng.randrange(len(values))]
        elif how == 1:
            values.append(values[rng.randrange(len(values))] if values else 0)
        elif how == 2:
            values = []
        elif how == 3:
            values.reverse()
            rng.shuffle(values)
        elif how == 4 and values:
            values = values + values
        elif attr.type == AttributeProto.INTS:
            values = values or [0]
            values[rng.randrange(len(values))] = _special_int(rng)
        elif attr.type == AttributeProto.FLOATS:
            values = values or [0.0]
            values[rng.randrange(len(values))] = _pick(rng, SPECIAL_FLOATS)
        else:
            values = values or [b""]
            values[rng.randrange(len(values))] = _pick(rng, ENUM_STRINGS)
        container = getattr(attr, field_name[attr.type])
        del container[:]
        container.extend(values)
    elif attr.type == AttributeProto.TENSOR:
        if mutate_tensor(attr.t, rng) is None:
            return None
    else:
        return None
    after = helper.get_attribute_value(attr)
    return f"attr {node.op_type}.{attr.name}: {_short(before)} -> {_short(after)}"


def mut_attr_type(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    candidates = [(n, a) for _, n in all_nodes(model) for a in n.attribute
                  if a.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS)]
    if not candidates:
        return None
    node, attr = _pick(rng, candidates)
    name = attr.name
    value = _pick(rng, [1, -1, 2.5, math.nan, b"abc", [1, 2], [0.5], [b"a"], [], 0])
    new = helper.make_attribute(name, value) if value != [] else AttributeProto(name=name, type=AttributeProto.INTS)
    attr.CopyFrom(new)
    return f"attr type {node.op_type}.{name} -> {_short(value)}"


def mut_attr_drop_add(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    pairs = all_nodes(model)
    if not pairs:
        return None
    _, node = _pick(rng, pairs)
    if node.attribute and rng.random() < 0.5:
        index = rng.randrange(len(node.attribute))
        name = node.attribute[index].name
        del node.attribute[index]
        return f"attr dropped {node.op_type}.{name}"
    name = _pick(rng, ATTR_POOL)
    value = _pick(rng, [0, 1, -1, 2, 3, 1.5, math.inf, b"constant", [0, 1], [1, 1, 1, 1], [2, 2], [-1], [0]])
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute(name, value))
    return f"attr set {node.op_type}.{name} = {_short(value)}"


def _dims_of(vi: onnx.ValueInfoProto) -> Any:
    if vi.type.WhichOneof("value") != "tensor_type":
        return None
    return vi.type.tensor_type.shape.dim


def mut_dims(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    g = model.graph
    infos = [*runtime_inputs(g)] * 3 + list(g.output) + list(g.value_info)
    infos = [vi for vi in infos if vi.type.WhichOneof("value") == "tensor_type"]
    if not infos:
        return None
    vi = _pick(rng, infos)
    shape = vi.type.tensor_type.shape
    how = rng.randrange(6)
    if how == 0 or not shape.dim:
        shape.dim.add().dim_value = _pick(rng, [1, 2, 3])
        what = "rank+1"
    elif how == 1:
        del shape.dim[rng.randrange(len(shape.dim))]
        what = "rank-1"
    elif how == 2:
        vi.type.tensor_type.ClearField("shape")
        what = "no shape"
    else:
        dim = shape.dim[rng.randrange(len(shape.dim))]
        value = _pick(rng, [0, 1, -1, 2, 3, 5, 7, 16, 1 << 16, 1 << 31, 1 << 40, -5, "N", "batch", ""])
        if isinstance(value, str):
            dim.dim_param = value
        else:
            dim.dim_value = value
        what = f"a dim -> {value!r}"
    return f"dims of '{_short(vi.name)}': {what}"


def mut_dtype(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    g = model.graph
    infos = [vi for vi in [*runtime_inputs(g), *runtime_inputs(g), *g.output, *g.value_info]
             if vi.type.WhichOneof("value") == "tensor_type"]
    if not infos:
        return None
    vi = _pick(rng, infos)
    old = vi.type.tensor_type.elem_type
    vi.type.tensor_type.elem_type = _pick(rng, TENSOR_TYPES)
    return f"dtype of '{_short(vi.name)}': {old} -> {vi.type.tensor_type.elem_type}"


def mut_node_inputs(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    pairs = all_nodes(model)
    if not pairs:
        return None
    graph, node = _pick(rng, pairs)
    names = value_names(graph) + value_names(model.graph)
    inputs = list(node.input)
    how = rng.randrange(5)
    if how == 0 and inputs:
        del inputs[rng.randrange(len(inputs))]
        what = "dropped"
    elif how == 1 and inputs:
        inputs.append(_pick(rng, inputs))
        what = "duplicated"
    elif how == 2 and inputs:
        inputs[rng.randrange(len(inputs))] = ""
        what = "made empty (optional)"
    elif how == 3 and inputs:
        inputs[rng.randrange(len(inputs))] = "no_such_value"
        what = "made dangling"
    else:
        if not inputs or not names:
            return None
        inputs[rng.randrange(len(inputs))] = _pick(rng, names)
        what = "rewired"
    del node.input[:]
    node.input.extend(inputs)
    return f"inputs of {node.op_type}: {what}"


def mut_node_outputs(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    pairs = [(g, n) for g, n in all_nodes(model) if n.output]
    if not pairs:
        return None
    graph, node = _pick(rng, pairs)
    how = rng.randrange(3)
    if how == 0:
        node.output[rng.randrange(len(node.output))] = _pick(rng, value_names(graph))
        return f"output of {node.op_type} clashes"
    if how == 1:
        node.output.append(f"extra_{rng.randrange(100)}")
        return f"output added to {node.op_type}"
    node.output[rng.randrange(len(node.output))] = ""
    return f"output of {node.op_type} made empty"


def mut_nodes(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    graphs = [g for g in graphs_of(model.graph) if g.node]
    if not graphs:
        return None
    graph = _pick(rng, graphs)
    nodes = list(graph.node)
    index = rng.randrange(len(nodes))
    node = nodes[index]
    how = rng.randrange(4)
    if how == 0:
        del nodes[index]
        what = "deleted"
    elif how == 1:
        copy = NodeProto()
        copy.CopyFrom(node)
        copy.name = node.name + "_dup" if node.name else ""
        if rng.random() < 0.7:
            for i, out in enumerate(copy.output):
                if out:
                    copy.output[i] = out + "_dup"
            what = "duplicated"
        else:
            what = "duplicated, same outputs"
        nodes.insert(index + 1, copy)
    elif how == 2:
        nodes.insert(rng.randrange(len(nodes)), nodes.pop(index))
        what = "moved"
    else:
        old = node.op_type
        node.op_type = _pick(rng, OP_POOL)
        if rng.random() < 0.1:
            node.domain = _pick(rng, ["com.microsoft", "ai.onnx.ml", "bogus", "ai.onnx"])
        return f"op {old} -> {node.op_type!r} (domain {node.domain!r})"
    del graph.node[:]
    graph.node.extend(nodes)
    return f"node {node.op_type} {what}"


def mutate_tensor(tensor: TensorProto, rng: random.Random) -> str | None:
    try:
        array = numpy_helper.to_array(tensor)
    except Exception:  # noqa: BLE001  (already broken)
        array = None
    how = rng.randrange(7)
    if how == 0:
        if tensor.raw_data:
            tensor.raw_data = tensor.raw_data[:rng.randrange(len(tensor.raw_data))]
        else:
            for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
                values = getattr(tensor, name)
                if len(values):
                    del values[rng.randrange(len(values)):]
        return "data truncated"
    if how == 1 and array is not None and array.size and array.dtype.kind == "f":
        flat = array.astype(array.dtype).reshape(-1).copy()
        flat[rng.randrange(flat.size)] = _pick(rng, [np.nan, np.inf, -np.inf, 1e30, -0.0])
        if rng.random() < 0.3:
            flat[:] = np.nan
        tensor.CopyFrom(numpy_helper.from_array(flat.reshape(array.shape), tensor.name))
        return "data NaN/inf"
    if how == 2 and array is not None and array.size and array.dtype.kind in "iu":
        flat = array.reshape(-1).copy()
        info = np.iinfo(flat.dtype)
        flat[rng.randrange(flat.size)] = _pick(rng, [info.max, info.min, 0, -1 if info.min < 0 else 0, 1 << 20
                                                     if info.max > 1 << 20 else info.max])
        tensor.CopyFrom(numpy_helper.from_array(flat.reshape(array.shape), tensor.name))
        return "int data edge value"
    if how == 3:
        dims = list(tensor.dims)
        choice = rng.randrange(4)
        if choice == 0 and dims:
            dims[rng.randrange(len(dims))] = _pick(rng, [0, 1, -1, 1 << 40, 2**31])
        elif choice == 1:
            dims.append(1)
        elif choice == 2 and dims:
            dims.pop()
        else:
            dims = list(reversed(dims))
        del tensor.dims[:]
        tensor.dims.extend(dims)
        return f"dims -> {dims}"
    if how == 4:
        old = tensor.data_type
        tensor.data_type = _pick(rng, TENSOR_TYPES)
        return f"data_type {old} -> {tensor.data_type}"
    if how == 5 and array is not None:
        shape = _pick(rng, [(), (0,), (1,), (2, 0, 3)])
        dtype = array.dtype if array.dtype != object else np.float32
        tensor.CopyFrom(numpy_helper.from_array(np.zeros(shape, dtype), tensor.name))
        return f"emptied to shape {shape}"
    if array is not None and array.dtype != object and array.size:
        scale = _pick(rng, [-1, 1000, 1e-6, 0])
        tensor.CopyFrom(numpy_helper.from_array((array * scale).astype(array.dtype), tensor.name))
        return f"data scaled by {scale}"
    return None


def mut_initializer(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    tensors = [t for g in graphs_of(model.graph) for t in g.initializer]
    if not tensors:
        return None
    tensor = _pick(rng, tensors)
    what = mutate_tensor(tensor, rng)
    return f"initializer '{_short(tensor.name)}': {what}" if what else None


def mut_external(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    """Moves an initializer to external data; the model's side files may hold it (or not)."""
    tensors = [t for t in model.graph.initializer if t.raw_data or t.float_data or t.int64_data or t.int32_data]
    if not tensors:
        return None
    tensor = _pick(rng, tensors)
    try:
        data = numpy_helper.to_array(tensor).tobytes()
    except Exception:  # noqa: BLE001
        return None
    # Half the time a valid reference to the side file (the data must then load as it was).
    valid = rng.random() < 0.5
    location = "weights.bin" if valid else _pick(rng, [
        "missing.bin", "../weights.bin", "/etc/hostname", "/dev/zero", "sub/../weights.bin", "", ".", "/",
        "weights.bin/", "..", "a\nb", "x" * 5000, "weights.bin"])
    offset = _pick(rng, [None, 0] if valid else [None, 0, 1, -1, 2**62, len(data)])
    length = _pick(rng, [None, len(data)] if valid else [None, len(data), len(data) - 1, 0, -5, 2**62])
    for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "raw_data"):
        tensor.ClearField(name)
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    body = data if valid or rng.random() < 0.5 else data[:len(data) // 2]
    pad = b"\0" * (offset if isinstance(offset, int) and 0 < offset < 64 else 0)
    ctx.side["weights.bin"] = pad + body
    return f"external data '{_short(tensor.name)}' at {location[:20]!r} offset {offset} length {length}"


def mut_constant_input(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    """A run-time input becomes an initializer (constant folding paths), or an initializer
    becomes a run-time input fed its own data (inputs that must be constants)."""
    g = model.graph
    inputs = runtime_inputs(g)
    if inputs and (rng.random() < 0.6 or not g.initializer):
        vi = _pick(rng, inputs)
        value = ctx.feeds.get(vi.name)
        if value is None:
            return None
        tensor = numpy_helper.from_array(np.asarray(value), vi.name)
        g.initializer.append(tensor)
        if rng.random() < 0.7:
            kept = [v for v in g.input if v.name != vi.name]
            del g.input[:]
            g.input.extend(kept)
        return f"input '{_short(vi.name)}' made constant"
    if not g.initializer:
        return None
    tensor = _pick(rng, list(g.initializer))
    try:
        array = numpy_helper.to_array(tensor)
    except Exception:  # noqa: BLE001
        return None
    kept = [t for t in g.initializer if t.name != tensor.name]
    del g.initializer[:]
    g.initializer.extend(kept)
    g.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(array.shape)))
    ctx.feeds[tensor.name] = array
    return f"initializer '{_short(tensor.name)}' made an input"


def mut_opset(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    how = rng.randrange(4)
    if how == 0:
        model.ir_version = _pick(rng, [0, 1, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 99, -1])
        return f"ir_version -> {model.ir_version}"
    defaults = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if how == 1 and defaults:
        defaults[0].version = _pick(rng, OPSETS)
        return f"opset -> {defaults[0].version}"
    if how == 2:
        entry = model.opset_import.add()
        entry.domain, entry.version = _pick(rng, [("", 9), ("ai.onnx", 18), ("com.microsoft", 1), ("bogus", 1),
                                                  ("ai.onnx.ml", 3)])
        return f"opset entry added {entry.domain!r} {entry.version}"
    if defaults:
        versions = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
        del model.opset_import[:]
        model.opset_import.extend(versions)
        return "default opset removed"
    return None


def rename_value(model: ModelProto, old: str, new: str, feeds: dict[str, Any] | None = None) -> None:
    """Renames a value everywhere (graphs, subgraphs, value infos, initializers)."""
    for g in graphs_of(model.graph):
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.name == old:
                vi.name = new
        for t in g.initializer:
            if t.name == old:
                t.name = new
        for n in g.node:
            for i, name in enumerate(n.input):
                if name == old:
                    n.input[i] = new
            for i, name in enumerate(n.output):
                if name == old:
                    n.output[i] = new
    if feeds is not None and old in feeds:
        feeds[new] = feeds.pop(old)


def mut_rename(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    g = model.graph
    names = value_names(g) + [o.name for o in g.output]
    how = rng.randrange(6)
    if how == 0:
        pairs = all_nodes(model)
        if not pairs:
            return None
        _, node = _pick(rng, pairs)
        node.name = _pick(rng, HOSTILE_NAMES)
        return f"node name -> {_short(node.name)!r}"
    if how == 1:
        g.name = _pick(rng, HOSTILE_NAMES)
        model.producer_name = _pick(rng, HOSTILE_NAMES)
        model.doc_string = _pick(rng, HOSTILE_NAMES)
        return "graph/producer/doc names hostile"
    if not names:
        return None
    old = _pick(rng, names)
    if how == 2 and len(names) > 1:
        # Another value's name with '_' and '-' or '.' swapped: the same C identifier once sanitized.
        other = _pick(rng, [n for n in names if n != old])
        new = other.replace("_", "-") if "_" in other else other + "."
        if rng.random() < 0.5:
            new = other + "-" if not other.endswith("_") else other[:-1] + "-"
    elif how == 3:
        new = INVALID_UTF8_MARK.decode()
    else:
        new = _pick(rng, HOSTILE_NAMES)
    if new in names:
        return None
    rename_value(model, old, new, ctx.feeds)
    return f"value '{_short(old)}' renamed {_short(new)!r}"


def mut_subgraph_attr(ctx: Mutating) -> str | None:
    model, rng = ctx.model, ctx.rng
    """Makes a model-level change to a nested graph: drops its outputs or inputs."""
    subs = [g for g in graphs_of(model.graph)][1:]
    if not subs:
        return None
    g = _pick(rng, subs)
    target = g.output if rng.random() < 0.5 else g.input
    if not target:
        return None
    del target[rng.randrange(len(target))]
    return "subgraph input/output dropped"


MUTATIONS: list[tuple[str, Callable[[Mutating], str | None], int]] = [
    ("attr-value", mut_attr_value, 30), ("attr-type", mut_attr_type, 4), ("attr-drop-add", mut_attr_drop_add, 8),
    ("dims", mut_dims, 16), ("dtype", mut_dtype, 8), ("node-inputs", mut_node_inputs, 8),
    ("node-outputs", mut_node_outputs, 4), ("nodes", mut_nodes, 8), ("initializer", mut_initializer, 10),
    ("external-data", mut_external, 4), ("constant-input", mut_constant_input, 10), ("opset", mut_opset, 5),
    ("rename", mut_rename, 10), ("subgraph", mut_subgraph_attr, 2),
]


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + f"...({len(text)})"


# ---------------------------------------------------------------------------------------------
# Inputs


def _np_dtype(elem_type: int) -> np.dtype | None:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # noqa: BLE001
        return None
    return None if dtype.kind == "O" else dtype


def random_array(shape: tuple[int, ...], dtype: np.dtype, gen: np.random.Generator, like: Any = None) -> np.ndarray:
    if isinstance(like, np.ndarray) and like.dtype == dtype and like.size and dtype.kind in "iub":
        return gen.choice(like.reshape(-1), size=shape).astype(dtype)
    if dtype == np.bool_:
        return gen.random(shape) < 0.5
    if dtype.kind in "iu" or dtype.name.startswith(("int", "uint")):
        low = 0 if dtype.kind == "u" or dtype.name.startswith("uint") else -3
        return gen.integers(low, 4, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (gen.standard_normal(shape) + 1j * gen.standard_normal(shape)).astype(dtype)
    return gen.standard_normal(shape).astype(np.float32).astype(dtype)


def make_inputs(model: ModelProto, known: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    gen = np.random.default_rng(rng.randrange(2**32))
    feeds: dict[str, Any] = {}
    for vi in runtime_inputs(model.graph):
        like = known.get(vi.name)
        if vi.type.WhichOneof("value") != "tensor_type":
            if like is not None:
                feeds[vi.name] = like
            continue
        tt = vi.type.tensor_type
        dtype = _np_dtype(tt.elem_type)
        if dtype is None:
            continue
        like_shape = like.shape if isinstance(like, np.ndarray) else None
        if tt.HasField("shape"):
            shape = []
            for i, dim in enumerate(tt.shape.dim):
                if dim.WhichOneof("value") == "dim_value" and dim.dim_value >= 0:
                    shape.append(dim.dim_value)
                elif like_shape is not None and len(like_shape) == len(tt.shape.dim):
                    shape.append(like_shape[i])
                else:
                    shape.append(2)
        else:
            shape = list(like_shape) if like_shape is not None else [2]
        if math.prod(shape) * dtype.itemsize > INPUT_BYTES_CAP:
            continue
        shape_t = tuple(shape)
        if isinstance(like, np.ndarray) and like.dtype == dtype and like.shape == shape_t and rng.random() < 0.9:
            feeds[vi.name] = like
        else:
            feeds[vi.name] = random_array(shape_t, dtype, gen, like)
    if feeds and rng.random() < 0.12:
        name = _pick(rng, sorted(feeds))
        value = feeds[name]
        if isinstance(value, np.ndarray) and value.size:
            value = value.copy()
            flat = value.reshape(-1)
            index = rng.randrange(flat.size)
            if value.dtype.kind == "f" or value.dtype.name in ("bfloat16", "float16"):
                flat[index] = _pick(rng, [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, 65504.0])
            elif value.dtype.kind in "iu":
                info = np.iinfo(value.dtype)
                flat[index] = _pick(rng, [info.max, info.min, 0, 1000 if info.max > 1000 else info.max,
                                          -1000 if info.min < -1000 else info.min])
            feeds[name] = value
    return feeds


# ---------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    index: int
    seed: str
    mutations: list[str]
    model: bytes
    inputs: dict[str, Any]
    side_files: dict[str, bytes] = field(default_factory=dict)
    rtol: float = 1e-3
    atol: float = 1e-5
    random_outputs: bool = False


def make_case(seeds: list[Seed], seed: int, index: int) -> Case:
    """Case `index` of the run with `seed`: a function of the two only."""
    rng = random.Random(f"ember-fuzz:{seed}:{index}")
    runnable = [s for s in seeds if s.runs]
    chosen = _pick(rng, runnable if runnable and rng.random() < 0.9 else seeds)
    original, seed_inputs = seed_model(chosen)
    model = ModelProto()
    model.CopyFrom(original)
    ctx = Mutating(model, rng, dict(seed_inputs))
    applied: list[str] = []
    count = 1 + (rng.random() < 0.35) + (rng.random() < 0.1)
    for _ in range(20):
        if len(applied) >= count:
            break
        kind, mutation, _ = rng.choices(MUTATIONS, [w for _, _, w in MUTATIONS])[0]
        try:
            what = mutation(ctx)
        except Exception as err:  # noqa: BLE001  (a mutation the proto's own rules refuse)
            what = f"failed ({type(err).__name__})"
        if what:
            applied.append(f"{kind}: {what}")
    inputs = make_inputs(model, ctx.feeds, rng)
    data = model.SerializeToString()
    if INVALID_UTF8_MARK in data:
        data = data.replace(INVALID_UTF8_MARK, INVALID_UTF8_BYTES)
    side = ctx.side
    ops = {n.op_type for _, n in all_nodes(model)}
    return Case(index, chosen.name, applied, data, inputs, side, chosen.rtol, chosen.atol,
                bool(ops & RANDOM_OPS))


# ---------------------------------------------------------------------------------------------
# Comparing


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind != "c" else a.astype(np.complex128)


def compare(ember: list, ort: list, rtol: float, atol: float) -> str | None:
    """None when Ember's outputs match ONNX Runtime's, else what differs."""
    if len(ember) != len(ort):
        return f"{len(ember)} outputs from Ember, {len(ort)} from ONNX Runtime"
    for i, (mine, ref) in enumerate(zip(ember, ort, strict=True)):
        if isinstance(ref, list):
            if not isinstance(mine, list | tuple) or len(mine) != len(ref):
                return f"output {i}: a sequence of {len(ref)} from ONNX Runtime, {type(mine).__name__} from Ember"
            problem = compare(list(mine), ref, rtol, atol)
            if problem:
                return f"output {i}: {problem}"
            continue
        mine, ref = np.asarray(mine), np.asarray(ref)
        if ref.dtype == np.uint8 and mine.dtype.itemsize == 1 and mine.dtype.kind not in "biu":
            ref = ref.view(mine.dtype)  # ONNX Runtime hands float8 results over as their bits
        if mine.shape != ref.shape:
            return f"output {i}: shape {mine.shape} from Ember, {ref.shape} from ONNX Runtime"
        if mine.dtype != ref.dtype:
            return f"output {i}: element type {mine.dtype} from Ember, {ref.dtype} from ONNX Runtime"
        if ref.dtype == object or ref.dtype.kind in "biuSU":
            bad = np.asarray(mine != ref)
            if bad.any():
                where = np.argwhere(bad)[0]
                return (f"output {i} ({ref.dtype}): {int(bad.sum())} of {ref.size} differ, first at {tuple(where)}: "
                        f"{mine[tuple(where)]!r} vs {ref[tuple(where)]!r}")
            continue
        a, b = _as_float(mine), _as_float(ref)
        problem = _compare_float(a, b, rtol if ref.itemsize >= 4 else max(rtol, 1e-2), atol)
        if problem:
            return f"output {i} ({ref.dtype}): {problem}"
    return None


def _compare_float(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> str | None:
    if a.dtype.kind == "c":
        return _compare_float(a.real, b.real, rtol, atol) or _compare_float(a.imag, b.imag, rtol, atol)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if (nan_a != nan_b).any():
        where = tuple(np.argwhere(nan_a != nan_b)[0])
        return (f"NaN positions differ ({int((nan_a != nan_b).sum())} of {a.size}), first at {where}: "
                f"{a[where]} vs {b[where]}")
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    if ((inf_a | inf_b) & (a != b)).any():
        where = tuple(np.argwhere((inf_a | inf_b) & (a != b))[0])
        return f"infinities differ, first at {where}: {a[where]} vs {b[where]}"
    finite = ~(nan_a | inf_a)
    if not finite.any():
        return None
    scale = float(np.max(np.abs(b[finite]), initial=0.0))
    tolerance = atol + rtol * np.abs(b) + 1e-6 * scale
    bad = finite & (np.abs(a - b) > tolerance)
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {a.size} values differ, first at {where}: {a[where]!r} vs {b[where]!r} "
                f"(max abs diff {float(np.max(np.abs(a - b)[finite])):.3g})")
    return None


# ---------------------------------------------------------------------------------------------
# Running one case (in a worker, or in this process with --replay)


@dataclass
class Outcome:
    status: str
    detail: str = ""
    seconds: float = 0.0


def _is_internal(message: str) -> bool:
    return any(marker in message for marker in INTERNAL_MARKERS)


def write_case_files(case: Case, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(case.model)
    for name, data in case.side_files.items():
        (folder / name).write_bytes(data)
    return path


def run_ember(path: Path, inputs: dict[str, Any], backend: str) -> tuple[list | None, Outcome | None]:
    """(outputs, None) when Ember ran the model, else (None, the outcome)."""
    from ember.onnx_backend import prepare
    from ember.support.errors import EmberError

    try:
        rep = prepare(str(path), "CPU", backend=backend)
        outputs = list(rep.run(dict(inputs)))
    except EmberError as err:
        message = f"{type(err).__name__}: {err}"
        return None, Outcome("internal" if _is_internal(message) else "refused", message[:2000])
    except Exception as err:  # noqa: BLE001  (an escape: the finding this fuzzer is for)
        frames = traceback.extract_tb(err.__traceback__)
        where = "; ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-4:])
        return None, Outcome("escape", f"{type(err).__name__}: {str(err)[:600]} (at {where})")
    return outputs, None


def run_ort(path: Path, inputs: dict[str, Any]) -> list | None:
    """ONNX Runtime's outputs, or None when it refuses the model or the inputs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        if any(n not in inputs for n in names if n not in _initializer_names(path)):
            return None
        return list(session.run(None, {n: inputs[n] for n in names if n in inputs}))
    except Exception:  # noqa: BLE001  (ONNX Runtime refuses: not ours to judge)
        return None


def _initializer_names(path: Path) -> set[str]:
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001
        return set()
    return {t.name for t in model.graph.initializer}


def run_case(case: Case, backend: str, folder: Path, phase: Callable[[str], None] = lambda p: None) -> Outcome:
    started = time.perf_counter()
    path = write_case_files(case, folder)

    def done(outcome: Outcome) -> Outcome:
        outcome.seconds = time.perf_counter() - started
        return outcome

    phase("ember")
    mine, outcome = run_ember(path, case.inputs, backend)
    if outcome is not None:
        return done(outcome)
    assert mine is not None
    phase("ort")
    theirs = run_ort(path, case.inputs)
    phase("compare")
    if theirs is None:
        return done(Outcome("ember-only"))
    if case.random_outputs:
        return done(Outcome("not-compared"))
    problem = compare(mine, theirs, case.rtol, case.atol)
    if problem is None:
        return done(Outcome("match"))
    # A tie-break: ONNX's reference implementation. Where Ember agrees with it and ONNX
    # Runtime does not, the difference is ONNX Runtime's (reported, not an Ember finding).
    phase("reference")
    reference = run_reference(path, case.inputs)
    if reference is not None and compare(mine, reference, case.rtol, case.atol) is None:
        return done(Outcome("ort-differs", f"{problem} (Ember matches ONNX's reference implementation)"))
    # Precision: the reference run in float64 (every float32 type, weight and input widened)
    # is the exact result; Ember matching it where ONNX Runtime does not (float32 rounding in
    # ONNX Runtime's own arithmetic, e.g. sampling coordinates on a 65536-pixel axis).
    phase("reference")
    for how, exact in (("ONNX's reference implementation", run_reference(path, case.inputs, widen=True)),
                       ("ONNX Runtime itself", run_ort_widened(path, case.inputs))):
        if exact is not None and compare_exact(mine, exact, case.rtol, case.atol) \
                and not compare_exact(theirs, exact, case.rtol, case.atol):
            return done(Outcome("ort-differs", f"{problem} (Ember matches {how} run in float64; ONNX Runtime "
                                               "in float32 does not: its own rounding)"))
    if reference is None:
        return done(Outcome("mismatch", f"{problem} (the reference fails on it)"))
    if compare(theirs, reference, case.rtol, case.atol) is None:
        return done(Outcome("mismatch", f"{problem} (the reference agrees with ONNX Runtime)"))
    # Ember, ONNX Runtime and the reference all differ: no agreed result to hold Ember to
    # (NaN inputs to DynamicQuantizeLinear give position-dependent results in ONNX Runtime).
    return done(Outcome("no-consensus", f"{problem} (the reference agrees with neither: "
                                        f"{compare(mine, reference, case.rtol, case.atol)})"))


def run_reference(path: Path, inputs: dict[str, Any], widen: bool = False) -> list | None:
    """The outputs of onnx.reference.ReferenceEvaluator, or None when it fails. widen: every
    float32 type, weight, constant and input made float64 first (see widen_model)."""
    from onnx.reference import ReferenceEvaluator

    try:
        model = onnx.load(str(path))
        names = [vi.name for vi in runtime_inputs(model.graph)]
        feeds = {n: inputs[n] for n in names if n in inputs}
        if widen:
            widen_model(model)
            feeds = {n: v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v
                     for n, v in feeds.items()}
        evaluator = ReferenceEvaluator(model)
        return [np.asarray(v) if not isinstance(v, list) else v for v in evaluator.run(None, feeds)]
    except Exception:  # noqa: BLE001
        return None


def run_ort_widened(path: Path, inputs: dict[str, Any]) -> list | None:
    """ONNX Runtime's outputs for the model and inputs widened to float64 (widen_model)."""
    try:
        model = onnx.load(str(path))
        widen_model(model)
        wide = path.with_name("model-float64.onnx")
        wide.write_bytes(model.SerializeToString())
    except Exception:  # noqa: BLE001
        return None
    return run_ort(wide, {n: v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v
                          for n, v in inputs.items()})


def widen_model(model: ModelProto) -> None:
    """float32 -> float64 everywhere in the model: value types, initializers, tensor
    attributes and Cast/CastLike/RandomX 'to'/'dtype' attributes."""
    def widen_tensor(t: TensorProto) -> None:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    for g in graphs_of(model.graph):
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type == TensorProto.FLOAT:
                vi.type.tensor_type.elem_type = TensorProto.DOUBLE
        for t in g.initializer:
            widen_tensor(t)
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.TENSOR:
                    widen_tensor(a.t)
                elif a.type == AttributeProto.INT and a.name in ("to", "dtype") and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.DOUBLE


def compare_exact(outputs: list, exact: list, rtol: float, atol: float) -> bool:
    """Whether float32 `outputs` match float64 `exact` ones (compared as float32 would be)."""
    if len(outputs) != len(exact):
        return False
    narrowed = [np.asarray(e).astype(np.asarray(o).dtype) if isinstance(o, np.ndarray) and isinstance(e, np.ndarray)
                and np.asarray(e).dtype == np.float64 and o.dtype == np.float32 else e
                for o, e in zip(outputs, exact, strict=True)]
    return compare(outputs, narrowed, rtol, atol) is None


def _limit_worker(cache_dir: str | None) -> None:
    import resource
    import warnings

    os.environ.update(WORKER_ENV)
    if cache_dir:
        os.environ["EMBER_CACHE_DIR"] = cache_dir
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")


def _fuzz_worker(conn, backend: str, cache_dir: str | None, sanitized: bool) -> None:
    if not sanitized:
        _limit_worker(cache_dir)
    else:
        import warnings

        os.environ.update({k: v for k, v in WORKER_ENV.items() if k.startswith("EMBER_")})
        warnings.simplefilter("ignore")
    work = Path(tempfile.mkdtemp(prefix="ember-fuzz-"))
    try:
        while True:
            case = conn.recv()
            if case is None:
                return
            folder = work / f"{case.index}"
            outcome = run_case(case, backend, folder, lambda p: conn.send(("phase", p)))
            shutil.rmtree(folder, ignore_errors=True)
            conn.send(("done", outcome))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The pool: long-lived workers, restarted when one dies, hangs or has run `recycle` tasks


@contextlib.contextmanager
def _environment(changes: dict[str, str] | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in (changes or {})}
    os.environ.update(changes or {})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Worker:
    def __init__(self, ctx, target, args: tuple, env: dict[str, str] | None) -> None:
        self.conn, child = ctx.Pipe()
        with _environment(env):
            self.process = ctx.Process(target=target, args=(child, *args), daemon=True)
            self.process.start()
        child.close()
        self.task: Any = None
        self.phase = ""
        self.started = 0.0
        self.done = 0

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def give(self, task: Any) -> None:
        self.task, self.phase, self.started = task, "sent", time.monotonic()
        self.conn.send(task)

    def stop(self, kill: bool = False) -> None:
        if not kill:
            with contextlib.suppress(OSError, BrokenPipeError):
                self.conn.send(None)
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


@dataclass
class Finished:
    task: Any
    result: Any  # what the worker sent, or None when it died or timed out
    status: str  # "done", "died" or "timeout"
    phase: str  # the last phase the worker reported
    pid: int
    exitcode: int | None = None
    seconds: float = 0.0


def run_pool(tasks: Iterator[Any], target, args: tuple, jobs: int, timeout: float,
             on_finished: Callable[[Finished], None], env: dict[str, str] | None = None,
             recycle: int = 0) -> None:
    """Feeds `tasks` to `jobs` workers running `target(conn, *args)`: each receives a task and
    sends ("phase", name) messages, then ("done", result). A worker that dies, or runs one phase
    past `timeout` seconds, is replaced."""
    ctx = multiprocessing.get_context("spawn")
    pending = iter(tasks)
    exhausted = False
    workers = [Worker(ctx, target, args, env) for _ in range(max(1, jobs))]
    try:
        while True:
            for i, w in enumerate(workers):
                if w.task is None and not exhausted:
                    if recycle and w.done >= recycle:
                        w.stop()
                        workers[i] = w = Worker(ctx, target, args, env)
                    try:
                        w.give(next(pending))
                    except StopIteration:
                        exhausted = True
            busy = [w for w in workers if w.task is not None]
            if not busy:
                return
            ready = wait([w.conn for w in busy], timeout=0.25)
            for i, w in enumerate(list(workers)):
                if w.task is None:
                    continue
                finished = None
                if w.conn in ready:
                    try:
                        while w.conn.poll():
                            kind, payload = w.conn.recv()
                            if kind == "phase":
                                w.phase, w.started = payload, time.monotonic()
                            else:
                                finished = Finished(w.task, payload, "done", w.phase, w.pid)
                                break
                    except (EOFError, OSError):
                        w.process.join(2)
                        finished = Finished(w.task, None, "died", w.phase, w.pid, w.process.exitcode)
                elif time.monotonic() - w.started > timeout:
                    finished = Finished(w.task, None, "timeout", w.phase, w.pid)
                if finished is None:
                    continue
                finished.seconds = time.monotonic() - w.started
                w.task = None
                w.done += 1
                if finished.status != "done":
                    w.stop(kill=True)
                    workers[i] = Worker(ctx, target, args, env)
                on_finished(finished)
    finally:
        for w in workers:
            w.stop(kill=w.task is not None)


# ---------------------------------------------------------------------------------------------
# A run


@dataclass
class Record:
    index: int
    seed: str
    mutations: list[str]
    status: str
    detail: str
    seconds: float


def classify(finished: Finished) -> Outcome:
    if finished.status == "done":
        return finished.result
    in_ort = finished.phase in ("ort", "compare")
    if finished.phase == "reference":  # Ember and ONNX Runtime differ, and the tie-break failed
        return Outcome("mismatch", f"the results differ from ONNX Runtime's, and ONNX's reference "
                                   f"{'died' if finished.status == 'died' else 'hung'} on the case")
    if finished.status == "died":
        code = finished.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return Outcome("ort-crash" if in_ort else "crash", f"worker died ({how}) in phase {finished.phase}")
    return Outcome("ort-timeout" if in_ort else "hang", f"phase {finished.phase} ran past the time limit")


def save_finding(case: Case, outcome: Outcome, backend: str, out: Path) -> Path:
    folder = out / outcome.status / f"{case.index:06d}"
    write_case_files(case, folder)
    arrays = {k: v for k, v in case.inputs.items() if isinstance(v, np.ndarray)}
    # ml_dtypes arrays (bfloat16, int4...) are stored as their bytes and viewed back on load.
    np.savez(folder / "inputs.npz", **{f"in_{i}": v.view(np.uint8) if v.dtype.kind == "V" else v
                                      for i, v in enumerate(arrays.values())})
    info = {"index": case.index, "seed_model": case.seed, "mutations": case.mutations, "backend": backend,
            "status": outcome.status, "detail": outcome.detail, "input_names": list(arrays),
            "input_dtypes": [v.dtype.name for v in arrays.values()],
            "side_files": sorted(case.side_files), "rtol": case.rtol, "atol": case.atol,
            "random_outputs": case.random_outputs}
    (folder / "info.json").write_text(json.dumps(info, indent=1))
    return folder


def load_saved(folder: Path) -> tuple[Case, str]:
    info = json.loads((folder / "info.json").read_text())
    import ml_dtypes

    with np.load(folder / "inputs.npz") as data:
        inputs = {name: data[f"in_{i}"] for i, name in enumerate(info["input_names"])}
    for (name, value), dtype in zip(list(inputs.items()), info.get("input_dtypes", []), strict=False):
        if value.dtype.name != dtype and hasattr(ml_dtypes, dtype):
            inputs[name] = value.view(getattr(ml_dtypes, dtype))
    side = {name: (folder / name).read_bytes() for name in info["side_files"]}
    case = Case(info["index"], info["seed_model"], info["mutations"], (folder / "model.onnx").read_bytes(), inputs,
                side, info["rtol"], info["atol"], info["random_outputs"])
    return case, info["backend"]


def prune_cache(cache: Path, older_than: float = 120.0) -> None:
    """Removes model libraries (not the kernel library object) the fuzz run built."""
    folder = cache / "cpu"
    if not folder.is_dir():
        return
    now = time.time()
    for entry in folder.iterdir():
        if entry.name.startswith("runtime-") or entry.name == ".lock":
            continue
        with contextlib.suppress(OSError):
            if now - entry.lstat().st_mtime > older_than:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()


WARM_UP = """
import numpy as np
from onnx import helper
import ember
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm",
                          [helper.make_tensor_value_info("x", 1, [3])], [helper.make_tensor_value_info("y", 1, None)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
ember.compile(model, backend="cpu").run({"x": np.ones(3, np.float32)})
"""


def warm_cache(env: dict[str, str] | None = None) -> None:
    """Builds the cpu backend's kernel library object once, before the timed workers start:
    on a loaded machine that build alone can run past a case's time limit."""
    import subprocess

    result = subprocess.run([sys.executable, "-c", WARM_UP], env={**os.environ, **(env or {})},
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"the cpu backend does not work here:\n{result.stderr[-3000:]}")


def fuzz(cases: int, backend: str, seed: int = 0, jobs: int = 2, timeout: float = 60.0, start: int = 0,
         out: Path | None = None, cache_dir: Path | None = None, recycle: int = 300,
         progress: Callable[[Record, Counter], None] | None = None) -> list[Record]:
    """Runs cases start .. start+cases-1 of the run `seed` on `backend`; returns a record per
    case (in index order). Findings are saved under `out` when given."""
    seeds = load_seeds()
    records: dict[int, Record] = {}
    counts: Counter = Counter()
    by_index: dict[int, Case] = {}

    def tasks() -> Iterator[Case]:
        for index in range(start, start + cases):
            case = make_case(seeds, seed, index)
            by_index[index] = case
            yield case

    last_prune = [time.monotonic()]

    def finished(f: Finished) -> None:
        case: Case = f.task
        outcome = classify(f)
        records[case.index] = Record(case.index, case.seed, case.mutations, outcome.status, outcome.detail,
                                     f.seconds if f.status != "done" else outcome.seconds)
        counts[outcome.status] += 1
        if out is not None and outcome.status in (*FINDINGS, *REVIEW):
            save_finding(case, outcome, backend, out)
        by_index.pop(case.index, None)
        if progress:
            progress(records[case.index], counts)
        if cache_dir is not None and time.monotonic() - last_prune[0] > 60:
            prune_cache(cache_dir)
            last_prune[0] = time.monotonic()

    if backend == "cpu":
        warm_cache({"EMBER_CACHE_DIR": str(cache_dir)} if cache_dir is not None else None)
    run_pool(tasks(), _fuzz_worker, (backend, str(cache_dir) if cache_dir else None, False), jobs, timeout,
             finished, recycle=recycle)
    if cache_dir is not None:
        prune_cache(cache_dir, older_than=0.0)
    return [records[i] for i in sorted(records)]


def summary(records: list[Record], backend: str, seconds: float) -> str:
    counts = Counter(r.status for r in records)
    lines = [f"backend {backend}: {len(records)} cases in {seconds:.1f} s ({len(records) / max(seconds, 1e-9):.1f} "
             "cases/s)", f"{'outcome':<14} {'cases':>7}"]
    for status in OUTCOMES:
        marker = "  <- finding" if status in FINDINGS and counts[status] else ""
        lines.append(f"{status:<14} {counts[status]:>7}{marker}")
    per_mutation: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        for m in r.mutations:
            per_mutation[m.split(":")[0]][r.status] += 1
    columns = ("refused", "match", "ember-only", "findings")
    lines.append(f"{'mutation':<16}" + "".join(f"{c:>11}" for c in columns))
    for kind in sorted(per_mutation):
        c = per_mutation[kind]
        row = [c["refused"], c["match"], c["ember-only"], sum(c[s] for s in FINDINGS)]
        lines.append(f"{kind:<16}" + "".join(f"{v:>11}" for v in row))
    findings = sum(counts[s] for s in FINDINGS)
    lines.append(f"findings: {findings} (crash {counts['crash']}, hang {counts['hang']}, escape {counts['escape']}, "
                 f"internal {counts['internal']}, mismatch {counts['mismatch']})")
    return "\n".join(lines)


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--backend", default="interpreter", choices=["interpreter", "cpu"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0,
                        help="first case index (to rerun one case: --start I --cases 1)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case phase (a hang past it)")
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"), help="findings are saved here")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="EMBER_CACHE_DIR of the workers (default: <ember cache>/fuzz, pruned as it goes)")
    parser.add_argument("--recycle", type=int, default=300, help="restart a worker after this many cases")
    parser.add_argument("--json", type=Path, help="write every case's record here")
    parser.add_argument("--replay", type=Path, help="run one saved finding in this process")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()

    if args.replay:
        case, backend = load_saved(args.replay)
        _limit_worker(None)
        with tempfile.TemporaryDirectory() as folder:
            outcome = run_case(case, args.backend if "--backend" in sys.argv else backend, Path(folder))
        print(f"{outcome.status}: {outcome.detail}")
        return 0

    from ember.support.paths import cache_dir as ember_cache

    cache = args.cache_dir or ember_cache() / "fuzz"
    started = time.perf_counter()
    print(f"fuzzing {args.cases} cases on {args.backend} (seed {args.seed}, {args.jobs} jobs, timeout "
          f"{args.timeout:g} s) on {cpu_name()}; findings -> {args.out}", flush=True)

    def progress(record: Record, counts: Counter) -> None:
        done = sum(counts.values())
        if record.status in (*FINDINGS, *REVIEW) and not args.quiet:
            print(f"  #{record.index} {record.status} [{record.seed}] {'; '.join(record.mutations)[:200]}: "
                  f"{record.detail[:300]}", flush=True)
        if done % 500 == 0:
            rate = done / (time.perf_counter() - started)
            brief = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            print(f"  {done} cases ({rate:.1f}/s): {brief}", flush=True)

    records = fuzz(args.cases, args.backend, args.seed, args.jobs, args.timeout, args.start, args.out, cache,
                   args.recycle, progress)
    seconds = time.perf_counter() - started
    print(summary(records, args.backend, seconds))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in records], indent=0))
    return 1 if any(r.status in FINDINGS for r in records) else 0


if __name__ == "__main__":
    raise SystemExit(main())
