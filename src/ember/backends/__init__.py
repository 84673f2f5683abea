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
    description file is a new backend (backends/npu.py)."""
    from ember.backends.npu import DEFAULT_TARGET, accelerator_targets

    targets = accelerator_targets()
    for target in targets:
        register_backend(target, _npu_backend(target, target), explicit=True)
    if DEFAULT_TARGET in targets:
        register_backend("npu", _npu_backend(DEFAULT_TARGET, "npu"), explicit=True)


_register_npus()

__all__ = ["Backend", "Executable", "InterpreterBackend", "automatic_backends", "available_backends", "get_backend",
           "register_backend"]
