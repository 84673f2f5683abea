"""The high-level graph IR: placeholders (model inputs), constants (weights), nodes whose
every result is typed, and named outputs. Nodes are kept in a topological order.

Imports ops/, types and support/ only."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.ops import NoAttrs, OpDef, OpError, get_op
from ember.support import limits
from ember.support.errors import VerificationError, node_location
from ember.support.names import UniqueNamer
from ember.types import TensorType


class Value:
    """A typed SSA value: the result of a node, a placeholder or a constant."""

    __slots__ = ("name", "type", "producer", "index")

    def __init__(self, name: str, type_: TensorType, producer: Node | None = None, index: int = 0) -> None:
        self.name = name
        self.type = type_
        self.producer = producer
        self.index = index

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Placeholder(Value):
    """A model input, bound at run time."""

    __slots__ = ()


class Constant(Value):
    """A weight or other compile-time tensor. Its data is read-only."""

    __slots__ = ("data",)

    def __init__(self, name: str, data: np.ndarray) -> None:
        # A read-only C-contiguous array that owns its bytes (another constant's data) is what a
        # constant keeps: share it (the partitioner outlines segments that reuse their model's
        # weights). Anything else is copied; np.array, not np.ascontiguousarray, which would
        # turn a 0-d array into 1-d.
        if not (isinstance(data, np.ndarray) and data.base is None and data.flags.c_contiguous
                and not data.flags.writeable):
            data = np.array(data, order="C", copy=True)
            data.setflags(write=False)
        super().__init__(name, TensorType.of(data))
        self.data = data

    def __repr__(self) -> str:
        return f"@{self.name}: {self.type}"


class Node:
    """One op applied to operands (None marks an absent optional operand)."""

    __slots__ = ("op", "name", "inputs", "attrs", "outputs")

    def __init__(self, op: str, name: str, inputs: Sequence[Value | None], attrs: Any) -> None:
        self.op = op
        self.name = name
        self.inputs: list[Value | None] = list(inputs)
        self.attrs = attrs
        self.outputs: list[Value] = []

    def input(self, index: int) -> Value:
        """Operand `index`, one the op requires. Only optional operands may be absent (None in
        `inputs`), and infer_types rejects a node whose required operand is missing."""
        value = self.inputs[index]
        if value is None:
            raise VerificationError(f"{self.location}: operand {index} is absent")
        return value

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    @property
    def location(self) -> str:
        return node_location(self.name, self.op)

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.op}>"


@dataclass
class Output:
    """A named model output and the value it reads."""

    name: str
    value: Value


class Graph:
    """A function from placeholders to outputs."""

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.inputs: list[Placeholder] = []
        self.constants: dict[str, Constant] = {}
        self.nodes: list[Node] = []
        self.outputs: list[Output] = []
        self._value_names = UniqueNamer()
        self._node_names = UniqueNamer()
        self._node_limit = limits.current().max_graph_nodes  # read once: add_node is hot

    # construction -----------------------------------------------------------------------

    def _claim_exact(self, name: str) -> str:
        if self._value_names.is_taken(name):
            raise VerificationError(f"value name '{name}' is defined twice")
        self._value_names.reserve(name)
        return name

    def add_input(self, name: str, type_: TensorType) -> Placeholder:
        limits.check_shape(type_.shape, type_.dtype.itemsize, f"input '{name}' ({type_})")
        limits.check_rank(type_.rank, f"input '{name}'")
        placeholder = Placeholder(self._claim_exact(name), type_)
        self.inputs.append(placeholder)
        return placeholder

    def add_constant(self, data: np.ndarray, name: str = "const", exact: bool = False) -> Constant:
        """Adds a constant named `name`, or a fresh variant of it unless `exact`."""
        const = Constant(self._claim_exact(name) if exact else self._value_names.unique(name), data)
        self.constants[const.name] = const
        return const

    def add_node(self, op: str, inputs: Sequence[Value | None], attrs: Any = None, name: str | None = None,
                 result_names: Sequence[str] | None = None) -> list[Value]:
        """Appends a node, infers its result types, and returns its results. Callers that
        add nodes out of order call sort() afterwards."""
        opdef = get_op(op)
        attrs = NoAttrs() if attrs is None else attrs
        # Absent trailing optionals are stored as None: every node has its full operand list.
        node = Node(op, self._node_names.unique(name or op), opdef.pad_optional(inputs), attrs)
        inputs = node.inputs
        try:
            types = opdef.infer_types(attrs, [None if v is None else v.type for v in inputs])
        except OpError as err:
            raise VerificationError(f"{node.location}: {err}") from None
        for type_ in types:
            limits.check_shape(type_.shape, type_.dtype.itemsize, f"{node.location}: result {type_}")
            limits.check_rank(type_.rank, f"{node.location}: a result")
        if len(self.nodes) >= self._node_limit:
            raise limits.ResourceLimitError(
                f"{node.location}: the graph would have more than {self._node_limit} nodes, the node limit "
                f"(unrolled loops count every copy of their body; {limits.HOW_TO_RAISE})")
        names = list(result_names) if result_names else [node.name] * len(types)
        for i, (base, type_) in enumerate(zip(names, types, strict=True)):
            node.outputs.append(Value(self._value_names.unique(base), type_, node, i))
        self.nodes.append(node)
        return node.outputs

    def add(self, op: str, *inputs: Value | None, attrs: Any = None, name: str | None = None) -> Value:
        """Convenience for single-result ops."""
        (out,) = self.add_node(op, inputs, attrs, name)
        return out

    def set_outputs(self, outputs: Iterable[tuple[str, Value]]) -> None:
        self.outputs = [Output(name, value) for name, value in outputs]

    # queries ---------------------------------------------------------------------------

    def users(self) -> dict[Value, list[tuple[Node, int]]]:
        uses: dict[Value, list[tuple[Node, int]]] = {}
        for node in self.nodes:
            for i, value in enumerate(node.inputs):
                if value is not None:
                    uses.setdefault(value, []).append((node, i))
        return uses

    def output_values(self) -> set[Value]:
        return {o.value for o in self.outputs}

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items()))

    # mutation --------------------------------------------------------------------------

    def replace_all_uses(self, old: Value, new: Value) -> None:
        if old.type != new.type:
            raise VerificationError(f"cannot replace {old!r} by {new!r}: types differ")
        for node in self.nodes:
            node.inputs = [new if v is old else v for v in node.inputs]
        for output in self.outputs:
            if output.value is old:
                output.value = new

    def remove_unused(self) -> bool:
        """Drops nodes whose results nobody reads and constants nobody uses."""
        live: set[Value] = self.output_values()
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(out in live for out in node.outputs):
                kept.append(node)
                live.update(v for v in node.inputs if v is not None)
        changed = len(kept) != len(self.nodes)
        self.nodes = kept[::-1]
        for name in [n for n, c in self.constants.items() if c not in live]:
            del self.constants[name]
            changed = True
        return changed

    def sort(self) -> None:
        """Restores a topological order, keeping the current order wherever it is valid so
        the result is deterministic."""
        producers = {out: node for node in self.nodes for out in node.outputs}
        done: set[int] = set()
        order: list[Node] = []
        for root in self.nodes:
            # Iterative post-order DFS (deep unrolled graphs would overflow recursion).
            stack: list[tuple[Node, int]] = [(root, 0)]
            on_path: set[int] = set()
            while stack:
                node, next_input = stack.pop()
                if id(node) in done:
                    continue
                on_path.add(id(node))
                pending = None
                for i in range(next_input, len(node.inputs)):
                    value = node.inputs[i]
                    producer = producers.get(value) if value is not None else None
                    if producer is not None and id(producer) not in done:
                        if id(producer) in on_path:
                            raise VerificationError(f"{producer.location} is part of a cycle")
                        pending = (i, producer)
                        break
                if pending is None:
                    on_path.discard(id(node))
                    done.add(id(node))
                    order.append(node)
                else:
                    stack.append((node, pending[0]))
                    stack.append((pending[1], 0))
        self.nodes = order

    def discard(self) -> None:
        """Empties the graph for good, unlinking each node from its values: the links form
        reference cycles, which would keep every constant alive until the collector's next
        pass; unlinked, each is freed as soon as nothing else holds it."""
        for node in self.nodes:
            node.inputs = []
            node.outputs = []
        self.nodes = []
        self.constants = {}
        self.inputs = []
        self.outputs = []

    def fresh_value_name(self, base: str) -> str:
        return self._value_names.unique(base)

    def fresh_node_name(self, base: str) -> str:
        return self._node_names.unique(base)

