"""The CPU backend: C code from the planned low-level program, compiled with the system C
compiler into a cached shared library and called through ctypes."""
from ember.backends.cpu.backend import CpuBackend

__all__ = ["CpuBackend"]
