"""The layering rule of docs/architecture.md, checked on the source: a module imports only
from layers below it (or its own package), layer-5 packages do not import each other, and only
the frontends import onnx. The layer table names exactly the top-level packages and modules of
src/ember, and agrees with the table in docs/architecture.md, so it cannot go stale."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ember"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Top-level package (a folder of src/ember) or module (a .py file, named without .py) -> its
# layer. A module belongs to the layer of its top-level package, so new modules inside an
# existing package (codegen/select.py, backends/cpu/kernels.py...) are covered without edits.
LAYERS = {
    "support": 0, "types": 1, "ops": 2, "graph": 3, "passes": 4,
    "transforms": 5, "lowering": 5, "partition": 5, "quant": 5, "isa": 5,
    "lir": 6, "memory": 7, "codegen": 8, "backends": 9, "frontends": 10,
    "driver": 11, "runtime": 11, "bench": 11, "heterogeneous": 11, "specialize": 11, "tuning": 11,
    "cli": 12, "onnx_backend": 12, "tools": 12, "serve": 12,
    "__init__": 12, "__main__": 13,
}
INDEPENDENT = {"transforms", "lowering", "partition", "quant", "isa"}
# The runtime wraps a backend's executable, and the driver builds the runtime's model; the
# heterogeneous compile partitions, then compiles each segment with the driver; the tuned
# compile compiles a model once per variant round with the driver and times the runtime's model.
ALLOWED_SAME_LAYER = {("driver", "runtime"), ("heterogeneous", "driver"), ("heterogeneous", "runtime"),
                      ("specialize", "driver"), ("specialize", "heterogeneous"), ("specialize", "runtime"),
                      ("tuning", "driver"), ("tuning", "runtime"), ("cli", "tools"), ("tools", "serve")}
# The package's entry points: not in the architecture table.
ENTRY_POINTS = {"__init__", "__main__"}


def _top_level_units() -> set[str]:
    """The top-level packages (folders holding Python modules) and modules of src/ember."""
    units = set()
    for path in SRC.iterdir():
        if path.is_dir() and any(path.rglob("*.py")):
            units.add(path.name)
        elif path.suffix == ".py":
            units.add(path.stem)
    return units


def _package_of(path: Path) -> str:
    """The LAYERS key a module belongs to: its top-level package, or itself."""
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "ember" and len(parts) > 1 else None


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def test_modules_import_only_lower_layers():
    violations = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC)
        package = _package_of(path)
        if package not in LAYERS:
            violations.append(f"{relative}: package '{package}' has no layer; add it to LAYERS")
            continue
        for module, line in _imports(path):
            if module.split(".")[0] == "onnx" and package != "frontends":
                violations.append(f"{relative}:{line} imports onnx outside frontends/")
            target = _top(module)
            if target is None or target == package:
                continue
            if target not in LAYERS:
                violations.append(f"{relative}:{line} imports unknown package ember.{target}")
            elif package in INDEPENDENT and target in INDEPENDENT:
                violations.append(f"{relative}:{line}: {package} and {target} must stay independent")
            elif LAYERS[target] > LAYERS[package] or (
                LAYERS[target] == LAYERS[package] and (package, target) not in ALLOWED_SAME_LAYER
            ):
                violations.append(f"{relative}:{line}: layer {LAYERS[package]} ({package}) imports "
                                  f"layer {LAYERS[target]} ({target})")
    assert not violations, "\n".join(violations)


def test_every_module_has_a_docstring():
    missing = [str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py"))
               if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert not missing, f"modules without a docstring: {missing}"


def test_layer_table_matches_the_source_tree():
    units = _top_level_units()
    listed_but_missing = sorted(set(LAYERS) - units)
    assert not listed_but_missing, f"LAYERS lists packages or modules that do not exist: {listed_but_missing}"
    unassigned = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if _package_of(p) not in LAYERS)
    assert not unassigned, f"modules with no layer (add their package to LAYERS): {unassigned}"
    assert INDEPENDENT <= set(LAYERS) and {p for pair in ALLOWED_SAME_LAYER for p in pair} <= set(LAYERS)


def test_layer_table_matches_the_architecture_doc():
    """Every row of the Layers table in docs/architecture.md (`| n | `pkg/`, `mod.py` | ... |`)
    gives the same layer as LAYERS, and the table names every package and module but the
    entry points."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, int] = {}
    for match in re.finditer(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, re.MULTILINE):
        for name in re.findall(r"`([A-Za-z_]\w*)(?:/|\.py)`", match.group(2)):
            documented[name] = int(match.group(1))
    assert documented, "no layer rows found under '## Layers' in docs/architecture.md"
    expected = {name: layer for name, layer in LAYERS.items() if name not in ENTRY_POINTS}
    assert documented == expected, (f"docs/architecture.md layers {documented} differ from LAYERS {expected}")
