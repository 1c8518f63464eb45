"""The step record: the tuple the training thread appends at each step end and the sender reads.

A plain tuple, because building it is the hot path of every step; these names say which field is
where, for every reader, so that the layout is written in one place.
"""

from __future__ import annotations

# In this order in the tuple.
SEQ = 0  # 1, 2, ...: the record's sequence number (its step index + 1)
END_NS = 1  # the step's end, on time.perf_counter_ns
DUR_NS = 2  # the step's wall time
DATA_NS = 3  # time in the data phase (blocked in the loader's next())
H2D_NS = 4  # time in the h2d phase
COMPUTE_NS = 5  # time in the compute phase
SAMPLES = 6  # samples in the step, or None
GPU = 7  # the step's _cuda.GpuStep (its GPU times, once resolved), or None
EVAL_NS = 8  # time in evaluation inside the loop, or None where not measured
