"""What the multi-GPU tests and benchmarks (test/GPU/tp_test.py,
test/GPU/ep_dist_test.py, bench/tp_bench.py, bench/ep_bench.py) share:
NVLink multicast kept off, as the two-GPU machine needs, the check that
torchrun started them, NCCL's start on the rank's GPU with a timeout, so
that a missing peer fails instead of hanging, results that name the rank,
the slowest rank's numbers and times, and the GPU-to-GPU copy bandwidth a
collective's floor is counted at. Importing it imports no torch: the
environment must be set before torch is (NCCL reads it when it creates a
communicator, torch's symmetric memory and NVSHMEM when they start)."""

import datetime
import os
import sys

from .results import Results

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0",
                 "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


def disable_multicast():
    """Sets MULTICAST_OFF in this process's environment."""
    os.environ.update(MULTICAST_OFF)


def require_torchrun(parser, world_size):
    """Exits through ``parser`` unless torchrun started this process."""
    if "LOCAL_RANK" not in os.environ:
        parser.error("run under torchrun: python3 -m torch.distributed.run "
                     f"--standalone --nproc-per-node {world_size} "
                     f"{sys.argv[0]}")


def init_nccl(timeout_s):
    """The default NCCL process group on this rank's GPU (torchrun's
    LOCAL_RANK), whose collectives give up after ``timeout_s`` seconds;
    returns the rank's CUDA device."""
    import torch

    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    torch.distributed.init_process_group(
        "nccl", timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device)
    return device


class RankResults(Results):
    """Results whose lines name the rank, counting passes too (the ranks'
    counts are summed over the group at the end)."""

    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.passed = 0

    def check(self, name, passed, detail=""):
        self.passed += bool(passed)
        super().check(f"[rank {self.rank}] {name}", passed, detail)

    def finish(self, name, device, group=None):
        """Sums the ranks' counts over ``group`` (the default group when
        None), prints "``name``: N passed, M failed" on rank 0, ends the
        process group and returns the exit code."""
        import torch

        counts = torch.tensor([self.passed, self.failed], device=device)
        torch.distributed.all_reduce(counts, group=group)
        passed, failed = counts.tolist()
        if self.rank == 0:
            print(f"{name}: {passed} passed, {failed} failed", flush=True)
        torch.cuda.synchronize()
        torch.distributed.destroy_process_group()
        return 1 if failed else 0


def peer_copy_bandwidth(group, flush, size=None, iterations=10):
    """Bytes/s of a copy of ``size`` bytes (timing.COPY_BYTES unless
    given) from this rank's GPU (the current one) into the next rank's of
    ``group`` (rank + 1 mod its size; the ranks on one host, their GPUs
    peers, as over NVLink), every rank copying at once, as a ring
    all-reduce's steps send, so that each link carries both directions:
    the median of ``iterations`` event-timed copies on this rank
    (timing.time_us, the L2 flushed before each). The copy is a
    peer-to-peer copy of this process's into memory it allocates on the
    next rank's GPU, which torchrun leaves visible to it."""
    import torch

    from .timing import COPY_BYTES, time_us

    size = size or COPY_BYTES
    rank = torch.distributed.get_rank(group)
    world_size = torch.distributed.get_world_size(group)
    here = torch.cuda.current_device()
    devices = torch.empty(world_size, dtype=torch.int64, device=here)
    torch.distributed.all_gather_into_tensor(
        devices, torch.tensor([here], device=here), group=group)
    peer = int(devices[(rank + 1) % world_size])
    if peer == here or not torch.cuda.can_device_access_peer(here, peer):
        raise RuntimeError(f"rank {rank}: GPU {here} cannot copy into the "
                           f"next rank's GPU {peer} peer to peer")
    source = torch.empty(size, dtype=torch.uint8, device=here)
    target = torch.empty(size, dtype=torch.uint8, device=peer)
    torch.cuda.synchronize()
    torch.distributed.barrier(group=group)
    us = time_us(lambda: target.copy_(source), flush, iterations)
    del target
    torch.cuda.empty_cache()  # the peer GPU's block, cached by this process
    return size / (us * 1e-6)


def slowest(values, group):
    """The largest of each of ``values`` (numbers) over the ranks of
    ``group``, as a list: every rank gets the same."""
    import torch

    tensor = torch.tensor(values, dtype=torch.float64, device="cuda")
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX,
                                 group=group)
    return tensor.tolist()


def slowest_us(function, flush, group, iterations):
    """The median µs of ``function`` (timing.time_us: ``iterations``
    event-timed calls, the L2 flushed before each) on the slowest rank of
    ``group``, the ranks started together. A collective or barrier inside
    ``function`` makes the ranks wait for the later one, so they run in
    step."""
    import torch

    from .timing import time_us

    torch.cuda.synchronize()
    torch.distributed.barrier(group=group)
    return slowest([time_us(function, flush, iterations)], group)[0]


def copy_bandwidths(group, flush):
    """(device copy, peer copy) bytes/s, the slowest rank's of each:
    timing.device_copy_bandwidth and peer_copy_bandwidth, what a
    multi-GPU benchmark's floors count at."""
    from .timing import device_copy_bandwidth

    rates = [device_copy_bandwidth(flush), peer_copy_bandwidth(group, flush)]
    return [-rate for rate in slowest([-rate for rate in rates], group)]
