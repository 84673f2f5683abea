"""Handing freed heap memory back to the operating system (glibc's malloc_trim), and large
zeroed blocks the kernel may back with transparent huge pages.

A compile allocates and frees many arrays of a few MB (weights sliced, transposed, padded and
packed). glibc keeps what is freed for reuse: once a large block has been freed its mmap
threshold rises (up to 32 MB), so such arrays come from the heap, and their freed pages stay
resident. Trimming once after kernel selection (where the packing temporaries die) lowered a
compile's peak RSS on AMD EPYC: MobileNetV2 117 -> 102 MB, ResNet-18 181 -> 176 MB, in about
a millisecond. With another C library than glibc this does nothing."""
from __future__ import annotations

import contextlib
import ctypes
import mmap
from collections.abc import Callable
from functools import cache

import numpy as np

PAGE_BYTES = 4096
HUGE_PAGE = 2 << 20


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Returns the heap's free pages to the OS where the C library can; True if it could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def huge_page_zeros(nbytes: int) -> np.ndarray:
    """`nbytes` zero bytes on a huge-page boundary of private memory that the kernel is asked to
    back with transparent huge pages (Linux, where THP is `madvise` or `always`; elsewhere 4 KB
    pages as usual): one TLB entry per 2 MB where the native code streams through the block.
    The array keeps the mapping alive."""
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(region, np.uint8)
    start = (-raw.ctypes.data) % HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # a kernel without THP
            region.madvise(mmap.MADV_HUGEPAGE, start, nbytes // mmap.PAGESIZE * mmap.PAGESIZE)
    return raw[start:start + nbytes]


def page_aligned_zeros(nbytes: int) -> np.ndarray:
    """`nbytes` zero bytes starting on a page, from a huge page up on huge pages: what the native
    code reads in place (the weight blob, the activation arenas). GEMV-like models read every
    weight each step, a TLB miss every 4 KB page otherwise (Xeon, 1 thread,
    bench/ab_revisions.py, the blob: GRU 0.93x, MLP 0.94x, BERT 0.98x, MobileNetV2 0.98x the
    time; ResNet-18 within its noise, 0.98-1.02x; the arenas besides: GRU 0.96-0.98x)."""
    if nbytes >= HUGE_PAGE:
        return huge_page_zeros(nbytes)
    raw = np.zeros(nbytes + PAGE_BYTES, np.uint8)
    start = (-raw.ctypes.data) % PAGE_BYTES
    return raw[start:start + nbytes]
