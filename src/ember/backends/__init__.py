"""Layer 9: backends. The interpreter is built in; others register by name or plugin."""
from ember.backends.api import Backend, Executable
from ember.backends.interpreter import InterpreterBackend
from ember.backends.registry import automatic_backends, available_backends, get_backend, register_backend

register_backend("interpreter", InterpreterBackend)


def _cpu_backend(**options):
    # Imported on use: the cpu backend pulls in codegen, which the interpreter never needs.
    from ember.backends.cpu import CpuBackend

    return CpuBackend(**options)


register_backend("cpu", _cpu_backend)


def _npu_backend(target: str, name: str):
    def make(**options):
        from ember.backends.npu import NpuBackend

        return NpuBackend(target, name=name, **options)

    return make


def _register_npus() -> None:
    """Every described accelerator by its target name, and "npu" for npu-systolic16: a new
    description file is a new backend (backends/npu.py). The files are only read here (the
    ISA mapper is imported when such a backend is made): every instruction timed by a cycles
    formula, and a scratchpad; a file that does not parse is left to `ember dump --stage
    mappings --target NAME` to explain."""
    import tomllib
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "isa" / "targets"  # ember.isa.describe.TARGETS_DIR
    for path in sorted(folder.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            continue
        instructions, memory = data.get("instructions") or [], data.get("memory") or []
        if (instructions and all(isinstance(i, dict) and "cycles" in i for i in instructions)
                and any(isinstance(m, dict) and m.get("scratchpad") for m in memory)):
            register_backend(path.stem, _npu_backend(path.stem, path.stem), explicit=True)
            if path.stem == "npu-systolic16":
                register_backend("npu", _npu_backend(path.stem, "npu"), explicit=True)


_register_npus()

__all__ = ["Backend", "Executable", "InterpreterBackend", "automatic_backends", "available_backends", "get_backend",
           "register_backend"]
