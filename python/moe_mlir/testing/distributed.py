"""What the multi-GPU test and benchmark (test/GPU/tp_test.py,
bench/tp_bench.py) share: NVLink multicast kept off, as the two-GPU
machine needs, the check that torchrun started them, and NCCL's start on
the rank's GPU with a timeout, so that a missing peer fails instead of
hanging. Importing it imports no torch: the environment must be set before
torch is (NCCL reads it when it creates a communicator, torch's symmetric
memory and NVSHMEM when they start)."""

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
