"""Collectives on NCCL, timed on the GPU's clock with CUDA events (stepscope._comm), on simulated GPUs
(tests/simnccl.py: ProcessGroupNCCL's streams and futures, DDP's reducer; tests/simcuda.py: the
device). Each figure below is worked out from the simulated timeline: nothing here needs torch.

Multi-process runs against a real sidecar (a slow rank named; every rank waiting alike on a slow link)
are test/nccl-e2e.test.ts."""

import sys
import threading
import unittest

from stepscope import _comm

from .quiet import Quiet
from .simcuda import ManualClock, Point, SimCuda, SimTensor
from .simnccl import ScriptedPeers, SimModel, install

MS = 1_000_000
MB = 1_000_000


class HostClock:
    """The tracker's own clock (grace periods, timeouts): moved by hand."""

    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


class NcclCase(Quiet):
    lag_ms = 0.0
    bandwidth_gbps = 100.0

    def setUp(self):
        super().setUp()
        self.clock = ManualClock(0)
        self.sim = SimCuda(clock=self.clock)
        self.patcher = install(self.sim, ScriptedPeers(int(self.lag_ms * MS)), self.bandwidth_gbps)
        self.patcher.start()
        self.addCleanup(self.patcher.stop)
        self.torch = sys.modules["torch"]
        self.dist = self.torch.distributed
        self.dist.init_process_group("nccl", rank=0, world_size=2)
        self.host = HostClock()
        self.tracker = _comm.CommTracker(clock=self.host, training_thread=threading.get_ident())
        self.tracker.activate(0)
        previous = _comm._current
        _comm._current = self.tracker
        self.addCleanup(setattr, _comm, "_current", previous)
        _comm._wrap_loaded(sys.modules)
        self.assertIsNotNone(getattr(self.dist.all_reduce, "__stepscope_wrapped__", None))

    def tearDown(self):
        self.assertEqual(self.sim.host_syncs, 0, "the hook synchronized the device")

    def step(self, run):
        """Run ``run()`` as one step; return its (comm_ns, comm_wait_ns, comm_bytes) once the GPU has
        done it, checking that the answer waits for the GPU rather than forcing it."""
        start = _comm._now()
        run()
        end = _comm._now()
        self.assertIsNone(self.tracker.step_columns(start, end), "answered before the GPU ran the collectives")
        self.clock.advance(1000 * MS)
        return self.tracker.step_columns(start, end)


class SynchronousCollectivesTest(NcclCase):
    lag_ms = 7.0  # the other rank reaches every collective 7 ms after this one

    def test_a_synchronous_all_reduce_is_waited_for_the_other_rank(self):
        tensor = SimTensor(MB // 4)  # 1 MB: 2(n-1)/n of it is sent on 2 ranks, 10 µs at 100 GB/s
        got = self.step(lambda: self.dist.all_reduce(tensor))
        self.assertEqual(got, (7 * MS + 15_000, 7 * MS + 15_000, MB))

    def test_work_queued_before_the_collective_delays_its_start(self):
        def run():
            self.sim.kernel(10)  # the step's compute, 10 ms on the GPU; the peer is ready 7 ms after us
            self.dist.all_reduce(SimTensor(MB // 4))

        self.assertEqual(self.step(run), (7 * MS + 15_000, 7 * MS + 15_000, MB))

    def test_on_a_side_stream_it_overlaps_compute_and_is_not_waited(self):
        side = self.sim.Stream()

        def run():
            with self.sim.stream(side):  # as FSDP issues its all-gathers
                self.dist.all_gather_into_tensor(SimTensor(MB // 2), SimTensor(MB // 4))

        got = self.step(run)
        self.assertEqual(got[0], 7 * MS + 15_000)  # (n-1)/n of 2 MB gathered: 1 MB, 10 µs at 100 GB/s, + 5 µs
        self.assertEqual(got[1], 0)
        self.assertEqual(got[2], MB)

    def test_async_then_wait(self):
        def run():
            work = self.dist.all_reduce(SimTensor(MB // 4), async_op=True)
            self.sim.kernel(3)  # compute overlapping the collective
            work.wait()  # the stream waits from 3 ms to the collective's end

        comm, wait, nbytes = self.step(run)
        self.assertEqual(comm, 7 * MS + 15_000)
        self.assertEqual(wait, 4 * MS + 15_000)
        self.assertEqual(nbytes, MB)

    def test_reduce_scatter_and_barrier_count_too(self):
        def run():
            self.dist.reduce_scatter_tensor(SimTensor(MB // 8), SimTensor(MB // 4))
            self.dist.barrier()

        comm, wait, nbytes = self.step(run)
        self.assertEqual(nbytes, MB // 2)
        # Both wait 7 ms for the other rank; the barrier begins where the reduce-scatter ended.
        self.assertEqual(comm, 7 * MS + 10_000 + 7 * MS + 5_000)
        self.assertEqual(wait, comm)


class DdpOnNcclTest(NcclCase):
    bandwidth_gbps = 0.5  # a 1 MB bucket (all of it sent on 2 ranks) takes 2 ms

    def ddp(self):
        model = SimModel(layers=[MB // 4] * 4, forward_ms=1, backward_ms=8)  # 4 layers of 1 MB
        return self.torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.95)

    def test_buckets_overlap_backward_and_the_stream_waits_for_the_last(self):
        model = self.ddp()
        self.assertIsNotNone(getattr(model, "_stepscope_watch", None), "not watched at construction")
        self.assertEqual(len(model.buckets), 4)

        def run():
            model.forward()
            model.backward()

        comm, wait, nbytes = self.step(run)
        # Backward produces a bucket every 2 ms from 1 ms on; each is 2 ms + 5 µs on NCCL's stream,
        # which runs them one after the other: from 3 ms to 11.02 ms. The last bucket is launched at
        # 9 ms, when backward's compute ends; the stream then waits until 11.02 ms.
        self.assertEqual(comm, 8 * MS + 20_000)
        self.assertEqual(wait, 2 * MS + 20_000)
        self.assertEqual(nbytes, 4 * MB)

    def test_a_hook_the_script_registers_runs_inside_and_is_timed(self):
        model = self.ddp()
        calls = []
        default_hooks = sys.modules["torch.distributed.algorithms.ddp_comm_hooks.default_hooks"]

        def my_hook(state, bucket):
            calls.append(state)
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook("mine", my_hook)
        comm, wait, nbytes = self.step(lambda: (model.forward(), model.backward()))
        self.assertEqual(calls, ["mine"] * 4)
        self.assertEqual((comm, wait), (8 * MS + 20_000, 2 * MS + 20_000))
        self.assertEqual(nbytes, 4 * MB)  # counted by the wrapped all_reduce inside the script's hook

    def test_a_model_built_before_tracking_is_found_at_install(self):
        _comm._current = None
        model = self.ddp()
        self.assertIsNone(getattr(model, "_stepscope_watch", None))
        _comm._watch_existing(sys.modules)
        self.assertIsNotNone(getattr(model, "_stepscope_watch", None))


class UnknownTimesTest(NcclCase):
    def test_events_that_never_complete_give_nil_times_after_10_s(self):
        start = _comm._now()
        self.sim.current_stream().wait_point(Point())  # e.g. a rank that never comes
        self.dist.all_reduce(SimTensor(MB // 4))
        end = _comm._now()
        self.assertIsNone(self.tracker.step_columns(start, end))
        self.host.now += 10_000 * MS
        self.assertEqual(self.tracker.step_columns(start, end), (None, None, MB))

    def test_closing_does_not_wait_for_the_gpu(self):
        start = _comm._now()
        self.sim.kernel(50)
        self.dist.all_reduce(SimTensor(MB // 4))
        end = _comm._now()
        self.assertEqual(self.tracker.step_columns(start, end, True, True), (None, None, MB))

    def test_a_dry_event_pool_gives_nil_not_a_guess(self):
        self.tracker._make_pool()
        pool = self.tracker._pool
        taken = [pool.take() for _ in range(_comm._GPU_EVENTS)]
        self.assertNotIn(None, taken)
        start = _comm._now()
        self.dist.all_reduce(SimTensor(MB // 4))
        end = _comm._now()
        self.assertEqual(self.tracker.step_columns(start, end), (None, None, MB))

    def test_events_go_back_to_the_pool(self):
        for _ in range(3):
            self.step(lambda: self.dist.all_reduce(SimTensor(16)))
        pool = self.tracker._pool
        self.assertEqual(pool._created, 2)
        self.assertEqual(len(pool._free), 2)

    def test_without_cuda_in_use_nothing_is_recorded(self):
        self.sim.initialized = False
        start = _comm._now()
        self.dist.all_reduce(SimTensor(MB // 4))
        end = _comm._now()
        self.assertEqual(self.sim.recorded, [])
        self.assertEqual(self.tracker.step_columns(start, end), (None, None, MB))


if __name__ == "__main__":
    unittest.main()
