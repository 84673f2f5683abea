"""The ONNX backend node test data, generated locally: the onnx wheel ships the test cases
as Python (`onnx.backend.test.case.node`) but not their data, so this writes each case once
into a cache folder, in the layout ONNX's own test data uses:

    <cache>/onnx-node-tests/<onnx version>/<case>/model.onnx
    <cache>/onnx-node-tests/<onnx version>/<case>/test_data_set_0/{input,output}_<i>.pb
    <cache>/onnx-node-tests/<onnx version>/index.json     (name, op type, kind; written last)

<cache> is $EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember. Generation
is deterministic (NumPy's global generator is seeded before the cases are collected), needs
no network and is safe when two processes race (each writes a private folder and renames
it into place). Like the cases themselves, it uses onnx.reference for expected outputs, so it
lives with the benchmarks and tests, never in Ember proper.

    python bench/onnx_node_data.py [--force]      # generate (or show where the data is)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ember.support.paths import cache_dir

SEED = 0
EXPANDED = "_expanded_function_"


@dataclass(frozen=True)
class NodeCase:
    """One generated case: `op` is the op under test (for an expanded case, the op whose
    function body the model holds), `kind` is 'node' or 'expanded'."""

    name: str
    op: str
    kind: str
    path: Path

    @property
    def model_path(self) -> Path:
        return self.path / "model.onnx"


def data_dir() -> Path:
    return cache_dir() / "onnx-node-tests" / onnx.__version__


def _op_of(model: onnx.ModelProto) -> tuple[str, str]:
    nodes = model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type, "node"
    # Expanded function cases name their internal tensors '<Op>_<test>_expanded_function_...'.
    for node in nodes:
        for out in node.output:
            if EXPANDED in out:
                return out.split("_", 1)[0], "expanded"
    return nodes[0].op_type if nodes else "?", "expanded"


def _write_value(path: Path, value, vi: onnx.ValueInfoProto) -> None:
    kind = vi.type.WhichOneof("value")
    if kind == "sequence_type":
        proto = numpy_helper.from_list(value, vi.name)
    elif kind == "optional_type":
        proto = numpy_helper.from_optional(value, vi.name)
    elif kind == "map_type":
        proto = numpy_helper.from_dict(value, vi.name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(np.asarray(value), vi.name)
    path.write_bytes(proto.SerializeToString())


def _collect():
    from onnx.backend.test.case.node import collect_testcases

    np.random.seed(SEED)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return collect_testcases()


def generate(force: bool = False) -> Path:
    """Writes every node case under data_dir() unless already there; returns the folder."""
    target = data_dir()
    if (target / "index.json").is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{onnx.__version__}-", dir=target.parent))
    try:
        index = []
        for case in _collect():
            folder = staging / case.name
            (folder / "test_data_set_0").mkdir(parents=True)
            (folder / "model.onnx").write_bytes(case.model.SerializeToString())
            graph = case.model.graph
            for i, (inputs, outputs) in enumerate(case.data_sets):
                sub = folder / f"test_data_set_{i}"
                sub.mkdir(exist_ok=True)
                for j, value in enumerate(inputs):
                    _write_value(sub / f"input_{j}.pb", value, graph.input[j])
                for j, value in enumerate(outputs):
                    _write_value(sub / f"output_{j}.pb", value, graph.output[j])
            op, kind = _op_of(case.model)
            index.append({"name": case.name, "op": op, "kind": kind, "rtol": case.rtol, "atol": case.atol})
        (staging / "index.json").write_text(json.dumps(index, indent=0))
        if target.exists():
            if not force:  # someone else finished first
                return target
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def load_index(folder: Path | None = None) -> list[NodeCase]:
    folder = folder or generate()
    entries = json.loads((folder / "index.json").read_text())
    return [NodeCase(e["name"], e["op"], e["kind"], folder / e["name"]) for e in entries]


def _read_value(path: Path, vi: onnx.ValueInfoProto):
    data = path.read_bytes()
    kind = vi.type.WhichOneof("value")
    if kind == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    if kind == "map_type":
        proto = onnx.MapProto()
        proto.ParseFromString(data)
        return numpy_helper.to_dict(proto)
    proto = TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def read_case(case: NodeCase) -> tuple[onnx.ModelProto, list, list]:
    """The model, its inputs and its expected outputs (data set 0)."""
    model = onnx.load(str(case.model_path))
    sub = case.path / "test_data_set_0"
    inputs = [_read_value(sub / f"input_{j}.pb", vi) for j, vi in enumerate(model.graph.input)
              if (sub / f"input_{j}.pb").exists()]
    outputs = [_read_value(sub / f"output_{j}.pb", vi) for j, vi in enumerate(model.graph.output)]
    return model, inputs, outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="regenerate even if present")
    args = parser.parse_args()
    folder = generate(force=args.force)
    print(f"{len(load_index(folder))} ONNX node test cases in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
