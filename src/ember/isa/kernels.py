"""Ember's compute ops as tensor expressions: KERNELS[op] turns a graph node (its typed
attributes and operand types) into the multiply-accumulate kernels it performs.

The op table (ops/) defines each op once; this table is keyed by op name, as lowering's and
codegen's are, and reads the op's own attribute dataclasses. An op absent from it has no
expression (it is not a compute op the mapper handles). Imports graph/, ops/, types and
support/."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ember.graph import Constant, Node
from ember.isa.expr import Affine, TensorExpr, make_expr
from ember.ops.nn import ConvAttrs, GemmAttrs
from ember.support.errors import EmberError
from ember.types import DType, TensorType


@dataclass(frozen=True)
class Kernel:
    """One multiply-accumulate a node performs. repeat: how many times it runs one after the
    other (a recurrent cell's per-step GEMM); padded: input tensors whose accesses read
    implicit zeros past their edges (a convolution's pads); constants: tensors that are
    compile-time weights (so packing them costs nothing at run time)."""

    name: str
    expr: TensorExpr
    repeat: int = 1
    padded: frozenset[str] = field(default_factory=frozenset)
    constants: frozenset[str] = field(default_factory=frozenset)

    def __str__(self) -> str:
        notes = []
        if self.repeat > 1:
            notes.append(f"x{self.repeat} in sequence")
        if self.padded:
            notes.append(f"zero-padded {','.join(sorted(self.padded))}")
        if self.constants:
            notes.append(f"constant {','.join(sorted(self.constants))}")
        return f"{self.name}: {self.expr}" + (f"  ({'; '.join(notes)})" if notes else "")


KernelFn = Callable[[Node], list[Kernel]]
KERNELS: dict[str, KernelFn] = {}


def kernel_of(*ops: str) -> Callable[[KernelFn], KernelFn]:
    def register(fn: KernelFn) -> KernelFn:
        for op in ops:
            if op in KERNELS:
                raise ValueError(f"op {op} has two kernel expressions")
            KERNELS[op] = fn
        return fn

    return register


def kernels_of(node: Node) -> list[Kernel]:
    """The kernels of `node`; [] for an op that is not a compute op of the table."""
    fn = KERNELS.get(node.op)
    return fn(node) if fn is not None else []


def _type(node: Node, index: int) -> TensorType:
    return node.input(index).type


def _constants(node: Node, names: dict[int, str]) -> frozenset[str]:
    return frozenset(name for index, name in names.items()
                     if index < len(node.inputs) and isinstance(node.inputs[index], Constant))


def _accumulator(dtype: DType) -> DType:
    return DType.INT32 if dtype.is_int else dtype


# ---------------------------------------------------------------------------------------
# Matrix products


def _matmul_expr(a: TensorType, b: TensorType, out_dtype: DType, trans_a: bool = False,
                 trans_b: bool = False) -> TensorExpr:
    """C[batch..., i, j] += A[batch..., i, k] * B[batch..., k, j] with NumPy's broadcasting:
    a batch axis of size 1 in one operand is not indexed there."""
    a_shape = (1,) + a.shape if a.rank == 1 else a.shape
    b_shape = b.shape + (1,) if b.rank == 1 else b.shape
    if trans_a:
        a_shape = a_shape[:-2] + (a_shape[-1], a_shape[-2])
    if trans_b:
        b_shape = b_shape[:-2] + (b_shape[-1], b_shape[-2])
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    rank = max(len(a_shape), len(b_shape)) - 2
    a_batch = (1,) * (rank - len(a_shape) + 2) + a_shape[:-2]
    b_batch = (1,) * (rank - len(b_shape) + 2) + b_shape[:-2]
    batch = [(f"b{i}" if rank > 1 else "b", max(x, y)) for i, (x, y) in enumerate(zip(a_batch, b_batch, strict=True))]

    def batch_index(shape: Sequence[int], own_rank: int) -> list[str | Affine]:
        own = shape[len(shape) - own_rank:] if own_rank else ()
        names = [name for name, _ in batch][rank - own_rank:]
        return [name if extent != 1 else Affine(()) for name, extent in zip(names, own, strict=True)]

    a_idx = batch_index(a_batch, len(a_shape) - 2) + (["k", "i"] if trans_a else ["i", "k"])
    b_idx = batch_index(b_batch, len(b_shape) - 2) + (["j", "k"] if trans_b else ["k", "j"])
    c_idx = [name for name, _ in batch] + ["i", "j"]
    return make_expr(("C", c_idx, out_dtype), ("A", a_idx, a.dtype), ("B", b_idx, b.dtype),
                     batch + [("i", m), ("j", n), ("k", k)])


@kernel_of("MatMul")
def _matmul(node: Node) -> list[Kernel]:
    a, b = _type(node, 0), _type(node, 1)
    return [Kernel("matmul", _matmul_expr(a, b, a.dtype), constants=_constants(node, {0: "A", 1: "B"}))]


@kernel_of("MatMulInteger", "QLinearMatMul")
def _matmul_integer(node: Node) -> list[Kernel]:
    b_index = 1 if node.op == "MatMulInteger" else 3
    a, b = _type(node, 0), _type(node, b_index)
    return [Kernel("matmul", _matmul_expr(a, b, DType.INT32), constants=_constants(node, {0: "A", b_index: "B"}))]


@kernel_of("Gemm")
def _gemm(node: Node) -> list[Kernel]:
    attrs: GemmAttrs = node.attrs
    a, b = _type(node, 0), _type(node, 1)
    expr = _matmul_expr(a, b, a.dtype, attrs.transA, attrs.transB)
    return [Kernel("gemm", expr, constants=_constants(node, {0: "A", 1: "B"}))]


@kernel_of("FullyConnected")
def _fully_connected(node: Node) -> list[Kernel]:
    x, w = _type(node, 0), _type(node, 1)
    rows = [(f"i{i}" if x.rank > 2 else "i", extent) for i, extent in enumerate(x.shape[:-1])]
    expr = make_expr(("Y", [r for r, _ in rows] + ["j"], x.dtype), ("X", [r for r, _ in rows] + ["k"], x.dtype),
                     ("W", ["k", "j"], w.dtype), rows + [("j", w.shape[1]), ("k", x.shape[-1])])
    return [Kernel("fully-connected", expr, constants=_constants(node, {0: "X", 1: "W"}))]


# ---------------------------------------------------------------------------------------
# Convolutions

_SPATIAL = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


def conv_expr(x: TensorType, w: TensorType, y: TensorType, attrs: ConvAttrs, acc: DType) -> TensorExpr:
    """O[n, g*M + m, o...] += I[n, g*C + c, o*stride + k*dilation...] * W[g*M + m, c, k...]
    over the padded input, with M and C the output and input channels per group. A depthwise
    convolution (M = C = 1) is O[n, g, o...] += I[n, g, o*s + k...] * W[g, k...]."""
    spatial = x.rank - 2
    if spatial not in _SPATIAL:
        raise EmberError(f"the ISA mapper describes 1-D to 3-D convolutions, not {spatial}-D")
    group = attrs.group
    per_group_out, per_group_in = w.shape[0] // group, w.shape[1]
    out_dims = [f"o{a}" for a in _SPATIAL[spatial]]
    kernel_dims = [f"k{a}" for a in _SPATIAL[spatial]]
    out_channel = Affine((("g", per_group_out), ("m", 1))) if group > 1 else Affine.of("m")
    in_channel = Affine((("g", per_group_in), ("c", 1))) if group > 1 else Affine.of("c")
    if group > 1 and per_group_out == 1:
        out_channel = Affine.of("g")
    if group > 1 and per_group_in == 1:
        in_channel = Affine.of("g")
    window = [Affine(tuple((d, c) for d, c in ((o, s), (k, dl)))) for o, k, s, dl
              in zip(out_dims, kernel_dims, attrs.strides, attrs.dilations, strict=True)]
    domain = [("n", x.shape[0]), ("g", group), ("m", per_group_out), ("c", per_group_in)]
    domain += list(zip(out_dims, y.shape[2:], strict=True)) + list(zip(kernel_dims, w.shape[2:], strict=True))
    return make_expr(("O", ["n", out_channel, *out_dims], acc), ("I", ["n", in_channel, *window], x.dtype),
                     ("W", [out_channel, "c", *kernel_dims], w.dtype), domain)


def _conv_kernel(node: Node, attrs: ConvAttrs, w_index: int, acc: DType) -> list[Kernel]:
    x, w, y = _type(node, 0), _type(node, w_index), node.outputs[0].type
    expr = conv_expr(x, w, y, attrs, acc)
    padded = frozenset({"I"}) if any(attrs.pads) else frozenset()
    return [Kernel("conv", expr, padded=padded, constants=_constants(node, {0: "I", w_index: "W"}))]


@kernel_of("Conv", "FusedConv")
def _conv(node: Node) -> list[Kernel]:
    attrs = node.attrs if isinstance(node.attrs, ConvAttrs) else node.attrs.conv
    return _conv_kernel(node, attrs, 1, _type(node, 0).dtype)


@kernel_of("ConvInteger", "QLinearConv")
def _conv_integer(node: Node) -> list[Kernel]:
    return _conv_kernel(node, node.attrs, 1 if node.op == "ConvInteger" else 3, DType.INT32)


# ---------------------------------------------------------------------------------------
# Recurrent cells: the gate GEMMs (the elementwise gate arithmetic is not a contraction)

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@kernel_of("RNN", "GRU", "LSTM")
def _recurrent(node: Node) -> list[Kernel]:
    x, w = _type(node, 0), _type(node, 1)
    seq, batch, inputs = x.shape
    directions, hidden = w.shape[0], node.attrs.hidden_size
    gates = _GATES[node.op] * hidden
    dtype = x.dtype
    # All steps' input projections at once: one GEMM with M = seq * batch.
    input_gates = make_expr(("XW", ["d", "t", "b", "g"], dtype), ("X", ["t", "b", "i"], dtype),
                            ("W", ["d", "g", "i"], dtype),
                            [("d", directions), ("t", seq), ("b", batch), ("g", gates), ("i", inputs)])
    # The recurrent projection depends on the previous step: seq GEMMs with M = batch.
    recurrent_gates = make_expr(("HR", ["d", "b", "g"], dtype), ("H", ["d", "b", "j"], dtype),
                                ("R", ["d", "g", "j"], dtype),
                                [("d", directions), ("b", batch), ("g", gates), ("j", hidden)])
    constants = _constants(node, {1: "W", 2: "R"})
    return [Kernel("input-gates", input_gates, constants=constants & {"W"}),
            Kernel("recurrent-gates", recurrent_gates, repeat=seq, constants=constants & {"R"})]
