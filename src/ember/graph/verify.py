"""Graph verifier: structure (definitions before uses, unique names, owned values) and types
(every node's result types equal what its OpDef infers)."""
from __future__ import annotations

from ember.graph.ir import Constant, Graph, Placeholder, Value
from ember.ops import OpError
from ember.support.errors import VerificationError


def verify_graph(graph: Graph) -> None:
    """Raises VerificationError naming the first broken invariant and where it is."""
    defined: set[Value] = set()
    names: set[str] = set()

    def define(value: Value, where: str) -> None:
        if value.name in names:
            raise VerificationError(f"{where}: value name '{value.name}' is defined twice")
        names.add(value.name)
        defined.add(value)

    for placeholder in graph.inputs:
        if not isinstance(placeholder, Placeholder):
            raise VerificationError(f"graph input '{placeholder.name}' is not a placeholder")
        define(placeholder, "graph inputs")
    for name, const in graph.constants.items():
        if not isinstance(const, Constant) or const.name != name:
            raise VerificationError(f"constant table entry '{name}' is malformed")
        define(const, "constants")

    node_names: set[str] = set()
    for node in graph.nodes:
        where = node.location
        if node.name in node_names:
            raise VerificationError(f"{where}: node name is used twice")
        node_names.add(node.name)
        for i, value in enumerate(node.inputs):
            if value is not None and value not in defined:
                raise VerificationError(
                    f"{where}: operand {i} ('{value.name}') is not defined before this node"
                )
        try:
            expected = node.opdef.infer_types(node.attrs, [None if v is None else v.type for v in node.inputs])
        except OpError as err:
            raise VerificationError(f"{where}: {err}") from None
        if len(expected) != len(node.outputs):
            raise VerificationError(f"{where}: has {len(node.outputs)} results, op defines {len(expected)}")
        for i, (out, type_) in enumerate(zip(node.outputs, expected, strict=True)):
            if out.type != type_:
                raise VerificationError(f"{where}: result {i} is typed {out.type}, inference gives {type_}")
            if out.producer is not node or out.index != i:
                raise VerificationError(f"{where}: result {i} does not point back to its node")
            define(out, where)

    output_names: set[str] = set()
    for output in graph.outputs:
        if output.name in output_names:
            raise VerificationError(f"output name '{output.name}' is used twice")
        output_names.add(output.name)
        if output.value not in defined:
            raise VerificationError(f"output '{output.name}' reads a value the graph does not define")
