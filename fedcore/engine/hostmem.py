"""Keep freed host memory in the process instead of handing it back to the OS after every step.

A batched round allocates and frees the same few-MiB tensors every local step (the stacked
gradients of a layer, the optimizer's temporaries). glibc serves blocks above its mmap threshold
with a fresh mmap and trims the heap's top once it holds more than its trim threshold, so each
step page-faults and zero-fills that memory again. Raising both thresholds lets the allocator
reuse the freed blocks (measured with the stacked optimizer's kept buffer and the store's in-place
normalization, which remove the rest of those page faults: docs/performance.md, "Allocation").
Values are untouched; only where memory comes from changes.
The cost: a process keeps its peak heap until it exits, which its peak RSS already was.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for this parameter on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30
OPT_OUT = "FEDCORE_MALLOPT"  # set to 0 to leave glibc's defaults


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process (every later call returns the first
    answer). False where it does not apply (not glibc, or FEDCORE_MALLOPT=0) or glibc refused a value."""
    if os.environ.get(OPT_OUT, "1") == "0":
        return False
    try:  # glibc's soname first: find_library may shell out to ldconfig, which slim images lack
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        name = ctypes.util.find_library("c")
        if not name:
            return False
        try:
            libc = ctypes.CDLL(name)
        except OSError:
            return False
    mallopt = getattr(libc, "mallopt", None)  # musl and other libcs have none
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; setting the mmap threshold also stops glibc's dynamic one
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
