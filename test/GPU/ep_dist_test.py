#!/usr/bin/env python3
"""GPU test of expert-parallel layers on two GPUs, one process each under
torchrun: each rank holds its E/2 routed experts and the shared ones, runs
its three bundles (dispatch, experts, combine) with the exchange buffers
in torch's symmetric memory (moe_mlir.expert_parallel.SymmetricExchange:
the dispatch and combine kernels store straight into the peer's slices
over NVLink) and a device-side barrier between the phases, and its output
is checked against the plain C++ reference of the whole layer on its
tokens.

Every rank builds the whole layer's weights from one seed (rank 0's,
broadcast). For each case (CASES: reduced Qwen3-30B-A3B, DeepSeek-V3 with
its shared expert, grouped sigmoid routing and correction bias, and
Mixtral), T in TOKEN_COUNTS tokens a rank and routing in ROUTINGS
("uniform": normal logits; "skewed": every token of both ranks favours
rank 0's first experts, so that rank 0's receive regions fill to their
capacity), the output, poisoned with NaN first, must be finite and within
tolerance (2e-2 of the reference's largest magnitude, as torch_test.py's)
on both ranks. The exchange buffers start as whatever the allocation held
and are never cleared between calls. Then the forward (three phases and
two barriers) is captured in a CUDA graph on both ranks and replayed on
new inputs: the replay must equal an eager forward bit for bit.

NVLink multicast stays off, as the two-GPU machine needs: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set here
before torch starts. The process group is created with a timeout and the
barriers give up after --barrier-timeout-ms, so a missing peer fails the
run instead of hanging it. Prints a PASS or FAIL line per check and rank,
and "N passed, M failed" over both ranks; exits non-zero on any failure.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/ep_dist_test.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 -m torch.distributed.run \\
        --standalone --nproc-per-node 2 test/GPU/ep_dist_test.py  # there
(scripts/gpu-run.sh ep runs the second on a machine with two GPUs).
"""

import argparse
import os
import sys
import time

from moe_mlir.testing.distributed import (MULTICAST_OFF, RankResults,
                                          disable_multicast, init_nccl,
                                          require_torchrun)

disable_multicast()  # before torch is imported

from moe_mlir import layers  # noqa: E402
from moe_mlir.expert_parallel import (PHASES, RankBundles,  # noqa: E402
                                      SymmetricExchange)
from moe_mlir.testing.presets import (REDUCED_PRESETS,  # noqa: E402
                                      check_reduced_presets)

try:
    import torch
    from moe_mlir.testing.expert_parallel import (TOLERANCE, full_weights,
                                                  rank_inputs, rank_weights,
                                                  reference_error)
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

WORLD_SIZE = 2
CASES = ("qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b")
TOKEN_COUNTS = (1, 7, 128, 4096)
ROUTINGS = ("uniform", "skewed")


def bundle_options(cache):
    return {"cache_dir": cache, "device_name": layers.DEFAULT_DEVICE_NAME}


def prepare(cache):
    check_reduced_presets()
    for preset in CASES:
        for rank in range(WORLD_SIZE):
            for tokens in TOKEN_COUNTS:
                for phase in PHASES:
                    print(layers.layer_bundle(
                        REDUCED_PRESETS[preset], "bf16", tokens_max=tokens,
                        token_buckets=(tokens,),
                        expert_parallel=(WORLD_SIZE, rank), phase=phase,
                        **bundle_options(cache)), flush=True)


class RankLayer:
    """This rank's part of one case at T tokens a rank: its bundles bound
    to the exchange buffers in symmetric memory, its experts' weights."""

    def __init__(self, layer, tokens, rank, group, args, generator, device):
        self.layer, self.tokens, self.device = layer, tokens, device
        self.bundles = RankBundles(layer, WORLD_SIZE, rank, tokens, "bf16",
                                   device=device.index,
                                   **bundle_options(args.cache))
        self.exchange = SymmetricExchange(self.bundles.exchange_shapes(),
                                          group, device,
                                          args.barrier_timeout_ms)
        self.bundles.bind(self.exchange.slices)
        self.weights, self.bias = full_weights(layer, generator, device)
        self.mine = rank_weights(layer, WORLD_SIZE, rank, self.weights)

    def inputs(self, rank, skewed, generator):
        """This rank's inputs: every rank draws all ranks' in turn from the
        shared generator, so that the generators stay in step."""
        drawn = [rank_inputs(self.layer, self.tokens, skewed, self.bias,
                             generator, self.device)
                 for _ in range(WORLD_SIZE)]
        return drawn[rank]

    def output(self):
        return torch.full((self.tokens, self.layer.hidden_size),
                          float("nan"), dtype=torch.bfloat16,
                          device=self.device)

    def forward(self, routing, output):
        self.bundles.forward(routing[0], routing[1], self.mine, output,
                             self.exchange.mine, self.exchange.barrier,
                             bias=routing[2] if len(routing) > 2 else None)


def check_graph(results, part, rank, generator, name):
    """The forward captured on both ranks and replayed on new inputs equals
    an eager forward on them bit for bit."""
    routing = part.inputs(rank, False, generator)
    output = part.output()
    stream = torch.cuda.Stream(part.device)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        part.forward(routing, output)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        part.forward(routing, output)
    for held, new in zip(routing, part.inputs(rank, True, generator)):
        held.copy_(new)
    output.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    replayed = output.clone()
    eager = part.output()
    part.forward(routing, eager)
    torch.cuda.synchronize()
    results.check(f"{name}: CUDA graph replay equals eager bit for bit",
                  torch.equal(replayed.view(torch.int16),
                              eager.view(torch.int16)))


def run(args):
    from moe_mlir.testing.reference import Reference

    device = init_nccl(args.timeout_s)
    rank = torch.distributed.get_rank()
    results = RankResults(rank)
    world_size = torch.distributed.get_world_size()
    if world_size != WORLD_SIZE:
        results.check(f"{WORLD_SIZE} ranks", False,
                      f"torchrun started {world_size}")
        torch.distributed.destroy_process_group()
        return 1
    group = torch.distributed.group.WORLD
    seed = torch.tensor([args.seed], device=device)
    torch.distributed.broadcast(seed, src=0)
    if rank == 0:
        print(f"ep_dist_test: seed {seed.item()}, torch {torch.__version__}, "
              f"{world_size} x {torch.cuda.get_device_name(device)}, "
              + ", ".join(f"{name}={os.environ[name]}"
                          for name in MULTICAST_OFF), flush=True)
    generator = torch.Generator().manual_seed(seed.item())
    reference = Reference(args.build)
    for preset in CASES:
        if args.only and preset not in args.only.split(","):
            continue
        for tokens in TOKEN_COUNTS:
            name = f"{preset} T={tokens}"
            part = RankLayer(REDUCED_PRESETS[preset], tokens, rank, group,
                             args, generator, device)
            for routing in ROUTINGS:
                inputs = part.inputs(rank, routing == "skewed", generator)
                output = part.output()
                part.forward(inputs, output)
                torch.cuda.synchronize()
                finite, error = reference_error(reference, part.layer, inputs,
                                                part.weights, output)
                results.check(f"{name} {routing}",
                              finite and error <= TOLERANCE,
                              f"max |error| / max |reference| = {error:.2e}"
                              + ("" if finite else ", not all finite"))
            check_graph(results, part, rank, generator, name)
            part.bundles.close()
            torch.distributed.barrier()

    counts = torch.tensor([results.passed, results.failed], device=device)
    torch.distributed.all_reduce(counts)
    passed, failed = counts.tolist()
    if rank == 0:
        print(f"ep_dist_test: {passed} passed, {failed} failed", flush=True)
    torch.cuda.synchronize()
    torch.distributed.destroy_process_group()
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="compile the bundles into --cache (here, "
                             "where the compiler is)")
    parser.add_argument("--cache", default="out/gpu-bundles/ep-dist",
                        help="the bundle cache")
    parser.add_argument("--seed", type=int, default=int(time.time()),
                        help="rank 0's is every rank's")
    parser.add_argument("--timeout-s", type=int, default=120,
                        help="how long a collective waits for a peer")
    parser.add_argument("--barrier-timeout-ms", type=int, default=10000,
                        help="how long a phase barrier waits for a peer")
    parser.add_argument("--build", default="build-runtime",
                        help="the build directory of libmoe_reference.so")
    parser.add_argument("--only", default="",
                        help="comma-separated presets (default: all)")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.cache)
        return 0
    if torch is None:
        parser.error("torch is needed (all but --prepare run on the GPUs)")
    require_torchrun(parser, WORLD_SIZE)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
