"""One allocator behaviour for every run of the accuracy benchmark's programs.

glibc's malloc raises its mmap threshold as large buffers are freed and gives the top of its heap
back to the kernel once more than twice that is free, so how many pages a step faults in again
depends on the order of a process's first allocations. Here, the 10 ms cell's ablation ran its steps
in 7.4 to 8.9 ms of CPU from one process to the next (60 to 400 page faults a step past start-up)
and the program itself in 9.2 to 10.5 ms: a truth (1 - t_ready / t_real) anywhere from 7% to 29%
for one loop. With fixed thresholds, set before the first step, the same runs took 7.4 to 7.8 and
9.1 to 9.2 ms, with no faults past start-up. The programs' work is unchanged; only the noise
between processes goes.
"""
import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def steady_allocator():
    """Fixed glibc thresholds: buffers under 32 MiB come from the heap, which is never trimmed. A
    no-op where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):
        pass
