"""Layer 9: backends. The interpreter is built in; others register by name or plugin."""
from ember.backends.api import Backend, Executable
from ember.backends.interpreter import InterpreterBackend
from ember.backends.registry import available_backends, get_backend, register_backend

register_backend("interpreter", InterpreterBackend)


def _cpu_backend(**options):
    # Imported on use: the cpu backend pulls in codegen, which the interpreter never needs.
    from ember.backends.cpu import CpuBackend

    return CpuBackend(**options)


register_backend("cpu", _cpu_backend)

__all__ = ["Backend", "Executable", "InterpreterBackend", "available_backends", "get_backend",
           "register_backend"]
