"""The layering rule of ARCHITECTURE.md, checked on the source: a module imports only from
layers below it (or its own package), layer-5 packages do not import each other, and only the
frontends import onnx."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ember"

LAYERS = {
    "support": 0, "types": 1, "ops": 2, "graph": 3, "passes": 4,
    "transforms": 5, "lowering": 5, "quant": 5, "partition": 5,
    "lir": 6, "memory": 7, "codegen": 8, "backends": 9, "frontends": 10,
    "driver": 11, "runtime": 11, "bench": 11, "cli": 12, "__init__": 12, "__main__": 13,
    "onnx_backend": 12,
}
INDEPENDENT = {"transforms", "lowering", "quant", "partition"}
# The runtime wraps a backend's executable, and the driver builds the runtime's model.
ALLOWED_SAME_LAYER = {("driver", "runtime")}


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
        package = relative.parts[0].removesuffix(".py")
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
