#!/usr/bin/env python3
"""Tensor-parallel benchmark on two GPUs, one process each under torchrun:
a full-size MoE layer sharded over both ranks (FusedMoE(tp_group=): each
rank holds I/2 of every expert, routes every token, runs its layer, and an
NCCL all-reduce sums the two) against the same layer on one GPU, with
their parts: the rank's shard alone (its bundle without the all-reduce)
and the all-reduce alone ([T, H] bf16, as the layer's).

Layers (--presets): Mixtral-8x7B and Qwen3-30B-A3B in bf16, DeepSeek-V3 in
fp8 with 128 x 128 block scales, all at full size; random weights, the
same on both ranks (one seed), the sharded module loaded from the one-GPU
module's weights (load_full_weights), so "vs one GPU" is the sharded
layer's distance to the one-GPU layer on the same inputs (bf16 roundings
of the two partial sums). Random router logits, the same on both ranks.
Times: µs per call, median of --iterations replays of a CUDA graph of one
call, the L2 flushed before each (bench/RESULTS.md's method), the slowest
rank's; a collective makes both ranks wait for the later one, so the ranks
run in step.

Floors, at bandwidths measured at the start of the run and printed there
(the slowest rank's): the device's, a 1 GiB copy within the GPU, bytes read
and written (moe_mlir.testing.timing.device_copy_bandwidth; an H200's HBM
is 4.8 TB/s nominal), and the peer's, a 1 GiB copy into the next rank's GPU
over NVLink, both ranks copying at once
(moe_mlir.testing.distributed.peer_copy_bandwidth). A layer's floor is
max(bytes / device bandwidth, flops / tensor-core rate (720 TFLOP/s bf16,
1450 fp8)), the bytes the weights of the experts the router hits (bf16, or
e4m3 and a float32 scale per 128 x 128 block) and the bf16 hidden states in
and out, for the one-GPU layer with all of I, for a rank's shard with
I / 2 (and half the flops); the all-reduce's floor is the bytes a ring
all-reduce sends per rank, 2 (W - 1) / W * T * H * 2 (bf16), over the peer
bandwidth; TP=2's floor is the shard's plus the all-reduce's (the
all-reduce sums the finished outputs). Each time is printed over its floor.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, set before NCCL
starts). The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 bench/tp_bench.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 -m torch.distributed.run \\
        --standalone --nproc-per-node 2 bench/tp_bench.py   # there
(scripts/gpu-run.sh tp-bench runs the second, its options after the mode).
"""

import argparse
import sys

from moe_mlir.testing.distributed import (copy_bandwidths,
                                          disable_multicast, init_nccl,
                                          require_torchrun, slowest_us)

disable_multicast()  # before torch is imported

import moe_mlir  # noqa: E402
from moe_mlir import layers  # noqa: E402
from moe_mlir.testing.presets import (FULL_PRESETS,  # noqa: E402
                                      check_full_presets)

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

WORLD_SIZE = 2
# The presets' layers (written out in moe_mlir.testing.presets: the GPU
# machine's moe_mlir has no compiler to read them from; --prepare checks
# they agree), with the fp8 weight scaling each is benchmarked in (None:
# bf16 weights).
PRESETS = {name: (FULL_PRESETS[name], scaling) for name, scaling in (
    ("mixtral-8x7b", None), ("qwen3-30b-a3b", None),
    ("deepseek-v3", "block"))}
TOKENS_MAX = 4096
# The default target, as test/GPU/tp_test.py: --prepare cannot know the
# GPU's name.
TARGET = {"device_name": layers.DEFAULT_DEVICE_NAME,
          "num_sms": layers.DEFAULT_NUM_SMS}
SCALE_NAMES = {"block": ("w13_weight_scale_inv", "w2_weight_scale_inv")}


def prepare(cache_dir, presets):
    """Compiles each preset's one-GPU and one-rank bundles."""
    check_full_presets()
    for name in presets:
        layer, scaling = PRESETS[name]
        for world_size in (1, WORLD_SIZE):
            path = moe_mlir.layer_bundle(
                layer.tensor_parallel(world_size, scaling), "bf16",
                quantization=scaling, cache_dir=cache_dir,
                tokens_max=TOKENS_MAX, **TARGET)
            print(f"{name}, {world_size} rank(s): {path}", flush=True)


def modules(name, args, group, device):
    """(one-GPU FusedMoE, sharded FusedMoE) of preset ``name`` with the
    same random weights on every rank."""
    from moe_mlir.torch import FusedMoE

    layer, scaling = PRESETS[name]
    options = {"layer": layer, "device": device, "cache_dir": args.cache,
               "tokens_max": TOKENS_MAX, **TARGET}
    if scaling is not None:
        options.update(dtype=torch.float8_e4m3fn, weight_scaling=scaling)
    torch.manual_seed(args.seed)  # reset_parameters' weights
    full = FusedMoE(**options)
    if layer.correction_bias:
        with torch.no_grad():
            full.correction_bias.uniform_(-0.1, 0.1)
    tp = FusedMoE(**options, tp_group=group)
    scales = [getattr(full, scale) for scale in SCALE_NAMES.get(scaling, ())]
    bias = ({"correction_bias": full.correction_bias}
            if layer.correction_bias else {})
    tp.load_full_weights(full.w13, full.w2, *scales, **bias)
    return full, tp


def routed_ids(layer, logits, bias):
    """The routed experts [T, top_k] the layer's router picks from
    ``logits`` and ``bias`` (the torch router of moe_mlir.testing.peers)."""
    from moe_mlir.testing.peers import layer_router_fields, torch_router

    with torch.no_grad():
        return torch_router(layer_router_fields(layer))(logits, bias)[1]


def floors_us(layer, scaling, tokens, ids, rates):
    """{call: its floor in µs} of the calls bench_preset times, for the
    routed experts ``ids`` at ``rates`` (copy_bandwidths)."""
    from moe_mlir.testing.timing import FP8_MATH, MATH, floor_us

    device_rate, peer_rate = rates
    hidden = layer.hidden_size
    router = layer.router
    hit = int(torch.unique(ids).numel()) + router.num_shared_experts
    # e4m3 codes and a float32 scale per block, or bf16.
    weight_bytes = 1 + 4 / layers.SCALE_BLOCK ** 2 if scaling else 2
    math = FP8_MATH if scaling else MATH

    def layer_floor(inter):
        moved = (hit * 3 * inter * hidden * weight_bytes +
                 2 * 2 * tokens * hidden)
        flops = 2 * tokens * router.num_slots * 3 * inter * hidden
        return floor_us(moved, flops, device_rate, math)

    sent = 2 * (WORLD_SIZE - 1) / WORLD_SIZE * tokens * hidden * 2
    floors = {"one GPU": layer_floor(layer.intermediate_size),
              "shard": layer_floor(layer.intermediate_size // WORLD_SIZE),
              "all-reduce": sent / peer_rate * 1e6}
    floors["TP=2"] = floors["shard"] + floors["all-reduce"]
    return floors


def bench_preset(name, args, group, device, flush, rates):
    """The table of one preset, printed by rank 0."""
    from moe_mlir.testing.tensors import relative_errors
    from moe_mlir.testing.timing import graphed

    layer, scaling = PRESETS[name]
    full, tp = modules(name, args, group, device)
    scales = [getattr(tp, scale) for scale in SCALE_NAMES.get(scaling, ())]
    generator = torch.Generator(device).manual_seed(args.seed)
    rank = torch.distributed.get_rank(group)
    if rank == 0:
        weights = f"fp8 {scaling} scales" if scaling else "bf16"
        print(f"\n{name} ({weights}), H={layer.hidden_size}, "
              f"I={layer.intermediate_size} -> "
              f"{tp.shard_layer.intermediate_size} per rank, "
              f"E={layer.num_experts}+{layer.router.num_shared_experts}, "
              f"top-{layer.router.top_k}; µs per call, slowest rank",
              flush=True)
        print(f"{'T':>6} {'one GPU':>9} {'TP=2':>9} {'shard':>9} "
              f"{'all-red.':>9} {'speedup':>8} {'TP floor':>9} "
              f"{'TP/floor':>9} {'1GPU/fl.':>9} {'shard/fl.':>9} "
              f"{'a-r/fl.':>9} {'vs one GPU':>11}", flush=True)
    for tokens in args.tokens:
        hidden = torch.randn(tokens, layer.hidden_size, device=device,
                             generator=generator).to(torch.bfloat16)
        logits = torch.randn(tokens, layer.num_experts, device=device,
                             generator=generator)
        reduced = torch.zeros(tokens, layer.hidden_size,
                              dtype=torch.bfloat16, device=device)
        calls = {
            "one GPU": lambda: full(hidden, logits),
            "TP=2": lambda: tp(hidden, logits),
            # The rank's layer through the op, without a group: no
            # all-reduce.
            "shard": lambda: torch.ops.moe_mlir.fused_moe(
                hidden, logits, tp.w13, tp.w2, tp.correction_bias,
                tp.bundle_path, *scales),
            # Zeros stay zeros however often they are summed.
            "all-reduce": lambda: torch.distributed.all_reduce(
                reduced, group=group),
        }
        times, outputs = {}, {}
        for call, function in calls.items():
            replay, outputs[call] = graphed(function,
                                            capture_error_mode="thread_local")
            times[call] = slowest_us(replay, flush, group, args.iterations)
            del replay
        error, _ = relative_errors(outputs["TP=2"], outputs["one GPU"])
        floors = floors_us(layer, scaling, tokens,
                           routed_ids(layer, logits, full.correction_bias),
                           rates)
        if rank == 0:
            print(f"{tokens:>6} {times['one GPU']:>9.1f} "
                  f"{times['TP=2']:>9.1f} {times['shard']:>9.1f} "
                  f"{times['all-reduce']:>9.1f} "
                  f"{times['one GPU'] / times['TP=2']:>7.2f}x "
                  f"{floors['TP=2']:>9.1f} "
                  + " ".join(f"{times[call] / floors[call]:>8.2f}x"
                             for call in ("TP=2", "one GPU", "shard",
                                          "all-reduce"))
                  + f" {error:>11.1e}", flush=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="compile the bundles into --cache (here, "
                             "where the compiler is)")
    parser.add_argument("--cache", default="out/gpu-bundles/tp-bench")
    parser.add_argument("--presets", default=",".join(PRESETS),
                        type=lambda text: text.split(","))
    parser.add_argument("--tokens", default="1,128,1024,4096",
                        type=lambda text: [int(t) for t in text.split(",")],
                        help=f"token counts per call, at most {TOKENS_MAX}")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=int, default=300,
                        help="how long a collective waits for a peer")
    args = parser.parse_args()
    unknown = [name for name in args.presets if name not in PRESETS]
    if unknown:
        parser.error(f"unknown presets {unknown} ({', '.join(PRESETS)})")
    if not all(1 <= tokens <= TOKENS_MAX for tokens in args.tokens):
        parser.error(f"token counts must be in [1, {TOKENS_MAX}]")
    if args.prepare:
        prepare(args.cache, args.presets)
        return 0
    if torch is None:
        parser.error("torch is needed (all but --prepare run on the GPUs)")
    require_torchrun(parser, WORLD_SIZE)

    from moe_mlir.testing.timing import L2Flush
    from moe_mlir.torch import unload_bundles

    device = init_nccl(args.timeout_s)
    world_size = torch.distributed.get_world_size()
    if world_size != WORLD_SIZE:
        parser.error(f"{WORLD_SIZE} ranks needed, torchrun started "
                     f"{world_size}")
    group = torch.distributed.new_group(list(range(world_size)))
    if torch.distributed.get_rank() == 0:
        print(f"tp_bench: torch {torch.__version__}, {world_size} x "
              f"{torch.cuda.get_device_name(device)}, NCCL "
              f"{'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    flush = L2Flush(device)
    rates = copy_bandwidths(group, flush)
    if torch.distributed.get_rank() == 0:
        print(f"floors at the slowest rank's device copy "
              f"{rates[0] / 1e12:.2f} TB/s (1 GiB within the GPU, bytes "
              f"read and written) and peer copy {rates[1] / 1e9:.0f} GB/s "
              f"(1 GiB into the next rank's GPU, both ranks at once)",
              flush=True)
    for name in args.presets:
        bench_preset(name, args, group, device, flush, rates)
        unload_bundles()  # their workspaces
        torch.cuda.empty_cache()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
