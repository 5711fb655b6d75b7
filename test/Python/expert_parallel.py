# RUN: %python %s | FileCheck %s
"""Layer.expert_shard and Layer.expert_slices, torch-free: the weights an
expert-parallel rank holds (what FusedMoE(ep_group=)'s parameters are and
load_full_weights copies) and where they come from in the whole layer's,
checked on the CPU path, where a world of W ranks, each rank's weights cut
by expert_slices, must give every rank's tokens the single-device layer's
output bit for bit; and the refusals of worlds that do not divide the
experts.

The world runs as moe_mlir.expert_parallel.simulate_world runs it on one
GPU: the three phases of each rank (moe-expert-parallel), phase after
phase for ranks 0 .. W-1, on one set of exchange buffers that starts stale
(NaN rows and weights, -1 slots and counts) and is never cleared, first on
random logits, then on logits that send every token to rank 0's experts;
the completion flags, zeroed once, must then count the two calls, and no
rank's status may record a wait that found a peer behind. A rank holding
another rank's experts, or its shared expert in the wrong place, gets the
wrong rows' products.
"""

import os
import sys

import numpy as np

import moe_mlir
from moe_mlir.expert_parallel import local_experts

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

# E = 8 routed experts in 4 groups and a shared one, a correction bias and
# expert biases: every weight expert_slices cuts.
layer = moe_mlir.Layer(
    32, 16, 8,
    moe_mlir.Router("sigmoid", 2, num_groups=4, topk_groups=2,
                    renormalize=True, routed_scaling_factor=2.5,
                    num_shared_experts=1),
    correction_bias=True, expert_biases=True)
TOKENS = 5

shard = layer.expert_shard(4)
print(shard.num_experts, shard.num_stored_experts, shard.w13_shape,
      shard.w2_bias_shape, shard.w13_scales_shape("channel"),
      layer.expert_shard(1) == layer)
# CHECK: 2 3 (3, 32, 32) (3, 32) (3, 32) True


def describe(slices):
    """A rank's pieces as text: "rank's <- full" expert ranges."""
    return " ".join(f"[{mine.start}:{mine.stop}]<-[{full.start}:{full.stop}]"
                    for (mine,), (full,) in slices)


for rank in range(2):
    slices = layer.expert_slices(2, rank, "block")
    print(rank, sorted(slices), describe(slices["w13"]),
          all(pieces == slices["w13"] for pieces in slices.values()),
          local_experts(layer, 2, rank))
# CHECK: 0 ['w13', 'w13_bias', 'w13_scales', 'w2', 'w2_bias', 'w2_scales'] [0:4]<-[0:4] [4:5]<-[8:9] True [0, 1, 2, 3, 8]
# CHECK: 1 ['w13', 'w13_bias', 'w13_scales', 'w2', 'w2_bias', 'w2_scales'] [0:4]<-[4:8] [4:5]<-[8:9] True [4, 5, 6, 7, 8]
# Without shared experts, biases or scales: the routed experts alone.
mixtral = moe_mlir.Layer.preset("mixtral-8x7b", reduced=True)
print({name: describe(pieces)
       for name, pieces in mixtral.expert_slices(4, 3).items()})
# CHECK: {'w13': '[0:2]<-[6:8]', 'w2': '[0:2]<-[6:8]'}


def cut(full, pieces, shape):
    """A rank's weight of ``shape`` that ``pieces`` (expert_slices) cut
    from ``full``; every element must be written once."""
    written = np.zeros(shape, dtype=np.int64)
    values = np.zeros(shape)
    for mine, whole in pieces:
        values[mine] = full[whole]
        written[mine] += 1
    assert (written == 1).all(), "a rank's element written twice or never"
    return values


def phases(world, rank, quantization):
    """Rank ``rank``'s dispatch, experts and combine on the CPU path."""
    module = moe_mlir.Module.parse(layer.expert_parallel_source(
        world, rank, TOKENS, "f32", quantization))
    module.run_pipeline("moe-expert-parallel")
    return [moe_mlir.CpuFunction.compile(module, f"layer_{phase}")
            for phase in ("dispatch", "experts", "combine")]


def stale(function, first):
    """Exchange buffers as a previous call could leave them, for
    ``function``'s arguments from ``first`` on: NaN floats, -1 integers."""
    return [np.full(shape, np.nan if dtype == "f32" else -1,
                    dtype=np.float32 if dtype == "f32" else np.int32)
            for dtype, shape in function.arguments[first:]]


def check_world(world, quantization, rng):
    """Every rank of a world of ``world`` ranks against the whole layer on
    its tokens, bit for bit, on random then skewed routing."""
    weights = {"w13": rng.uniform(-1, 1, layer.w13_shape)
               / np.sqrt(layer.hidden_size),
               "w2": rng.uniform(-1, 1, layer.w2_shape)
               / np.sqrt(layer.intermediate_size),
               "w13_bias": rng.uniform(-0.1, 0.1, layer.w13_bias_shape),
               "w2_bias": rng.uniform(-0.1, 0.1, layer.w2_bias_shape)}
    if quantization:
        weights["w13_scales"] = 2.0 ** rng.uniform(
            -6, -2, layer.w13_scales_shape(quantization))
        weights["w2_scales"] = 2.0 ** rng.uniform(
            -6, -2, layer.w2_scales_shape(quantization))
    bias = rng.uniform(-0.1, 0.1, layer.num_experts)
    full = moe_mlir.CpuFunction.compile(layer.source("f32", quantization))
    rank_layer = layer.expert_shard(world)
    shapes = {"w13": rank_layer.w13_shape, "w2": rank_layer.w2_shape,
              "w13_bias": rank_layer.w13_bias_shape,
              "w2_bias": rank_layer.w2_bias_shape}
    if quantization:
        shapes["w13_scales"] = rank_layer.w13_scales_shape(quantization)
        shapes["w2_scales"] = rank_layer.w2_scales_shape(quantization)
    ranks, mine = [], []
    for rank in range(world):
        slices = layer.expert_slices(world, rank, quantization)
        assert list(slices) == list(weights), list(slices)
        ranks.append(phases(world, rank, quantization))
        mine.append([cut(weights[name], slices[name], shapes[name])
                     for name in slices])
    # The receive buffers (the dispatch's last arguments but its flags) and
    # the return buffer (the experts phase's, before its flags and status)
    # stale; the flags of the dispatch and of the combine zeroed once; each
    # rank's status clear.
    receive = stale(ranks[0][0], 3)[:-1]
    returned = stale(ranks[0][1], -4)[0]
    flags = [np.zeros((world, world), dtype=np.int32) for _ in range(2)]
    statuses = [np.zeros(2, dtype=np.int32) for _ in range(world)]
    for routing in ("random", "skewed"):
        inputs = []
        for _ in range(world):
            x = rng.uniform(-1, 1, (TOKENS, layer.hidden_size))
            logits = rng.uniform(-2, 2, (TOKENS, layer.num_experts))
            if routing == "skewed":
                # Rank 0's experts, 0 and 1, in one group.
                logits[:, :2] += 8.0
            inputs.append((x, logits))
        for rank, (dispatch, _, _) in enumerate(ranks):
            *receive, flags[0] = dispatch(*inputs[rank], bias, *receive,
                                          flags[0])
        for rank, (_, experts, _) in enumerate(ranks):
            returned, flags[1], statuses[rank] = experts(
                *mine[rank], *receive, returned, *flags, statuses[rank])
        for rank, (_, _, combine) in enumerate(ranks):
            expected = full(*inputs[rank], weights["w13"], weights["w2"],
                            bias, *[weights[name]
                                    for name in list(weights)[2:]])
            output, statuses[rank] = combine(returned, flags[1],
                                             statuses[rank])
            assert np.array_equal(output, expected), (
                world, quantization, routing, rank,
                np.abs(output - expected).max())
    assert all((counters == 2).all() for counters in flags), flags
    assert all((status == 0).all() for status in statuses), statuses
    print(f"{quantization or 'f32'} weights, {world} ranks: every rank's "
          "output is the layer's bit for bit")


rng = np.random.default_rng(19)
for quantization, worlds in ((None, (1, 2, 4, 8)), ("channel", (2,)),
                             ("block", (4,))):
    for world in worlds:
        check_world(world, quantization, rng)
# CHECK: f32 weights, 1 ranks: every rank's output is the layer's bit for bit
# CHECK: f32 weights, 2 ranks: every rank's output is the layer's bit for bit
# CHECK: f32 weights, 4 ranks: every rank's output is the layer's bit for bit
# CHECK: f32 weights, 8 ranks: every rank's output is the layer's bit for bit
# CHECK: channel weights, 2 ranks: every rank's output is the layer's bit for bit
# CHECK: block weights, 4 ranks: every rank's output is the layer's bit for bit

report("E not divisible", lambda: layer.expert_shard(3))
# CHECK: E not divisible: ValueError: num_experts 8 is not divisible by 3 expert-parallel ranks
report("E not divisible, slices", lambda: layer.expert_slices(16, 0))
# CHECK: E not divisible, slices: ValueError: num_experts 8 is not divisible by 16 expert-parallel ranks
report("rank beyond", lambda: layer.expert_slices(2, 2))
# CHECK: rank beyond: ValueError: rank 2 is not one of 2 expert-parallel ranks
report("negative rank", lambda: local_experts(layer, 2, -1))
# CHECK: negative rank: ValueError: rank must be in [0, 2**63 - 1], got -1
report("no ranks", lambda: layer.expert_shard(0))
# CHECK: no ranks: ValueError: world_size must be in [1, 2**63 - 1], got 0
report("world size type", lambda: layer.expert_slices(2.0, 0))
# CHECK: world size type: TypeError: world_size must be an int, got float
