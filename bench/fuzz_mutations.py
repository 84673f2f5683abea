"""The mutation fuzzer's cases (bench/fuzz_models.py): the seed models, the mutations applied to
them at the protobuf level, the run-time inputs, and make_case, which makes case `index` of a
run from its seed alone (deterministic)."""
from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

try:  # run as a script (bench/ on sys.path) or imported as bench.fuzz_mutations
    from onnx_node_data import NodeCase, generate, load_index, read_case
except ImportError:  # pragma: no cover
    from bench.onnx_node_data import NodeCase, generate, load_index, read_case

RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
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
                with np.errstate(over="ignore"):  # 1e30 becomes inf in a 16-bit type, as meant
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

