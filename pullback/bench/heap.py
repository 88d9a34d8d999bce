"""What the C heap does with freed memory during the timed samples (glibc only).

A gradient over 1,000,000-element arrays allocates hundreds of 4 MB buffers. By default,
glibc hands freed memory back to the kernel when it lies at the top of the heap, and
whether it does depends on what else happens to be allocated: in one process every call
pays ~60,000 page faults for fresh memory, in another none. The same code then runs 2-3x
slower or faster, so ratios swing from run to run.

The suite fixes the state for every system alike. `keep_freed_memory()`, called once at the
start, makes glibc keep freed memory for reuse for the rest of the process. A workload
marked `fresh_memory` calls `release_freed_memory()` before each sample, so every call of
every system starts from a heap that holds nothing (what a process that returned its memory
pays).

>>> describe(kept=True)
'glibc keeps freed memory (mallopt); `fresh memory` workloads release it before each sample'
"""

import ctypes
import platform

# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 2**30


def is_glibc():
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _libc():
    return ctypes.CDLL(None) if is_glibc() else None


def keep_freed_memory():
    """Make glibc keep freed memory: no trimming below 1 GiB free at the top of the heap, and
    blocks up to 32 MiB from the heap rather than `mmap`. Returns False (and does nothing)
    on another C library."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX))


def release_freed_memory():
    """Hand all freed heap memory back to the kernel (`malloc_trim(0)`); the next allocations
    touch fresh pages. Returns False (and does nothing) on another C library."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(ctypes.c_size_t(0))
    return True


def describe(kept):
    """One line for the report on the heap's state during the timed samples."""
    if kept:
        return "glibc keeps freed memory (mallopt); `fresh memory` workloads release it before each sample"
    return "the C library's default (not glibc: freed memory kept or released as it decides)"
