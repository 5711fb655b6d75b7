# RUN: %python %s | FileCheck %s
"""Layer.tensor_parallel and Layer.shard_slices, torch-free: the rank's
layer and where its shard of each weight comes from, checked on the CPU
path, where the ranks' outputs must sum to the single-device layer's (what
FusedMoE(tp_group=) computes on GPUs, an all-reduce doing the sum), and
the refusals of sizes that do not split.

Tolerances (max |error| / max |full layer|, f32 layers): 1e-5 for weights
in the layer's dtype and for fp8 block scales, where every rank computes
its intermediate columns exactly as the full layer does (whole 128-column
activation groups) and only the order of the down projection's sum
differs; 5e-2 for per-tensor and per-channel fp8 scales, whose ranks
quantize their activations per token over their own columns, a finer
scale than the full layer's over all I (measured: 2e-2 to 3e-2); 1e-5
for static activation scales, which quantize each intermediate element
alone, so that every rank quantizes its columns as the full layer does. The
fp8 scales vary 16-fold, so a scale taken from the wrong rows is off by far
more.
"""

import os
import sys

import numpy as np

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

TOLERANCE = {None: 1e-5, "block": 1e-5, "channel": 5e-2, "tensor": 5e-2,
             "channel-static": 1e-5, "tensor-static": 1e-5}
# The static input scales of w13's and w2's inputs: about each input's amax
# / 448, as a calibration finds them (the hidden states are within 1, the
# intermediate values about 1e-2); the layer is then within 6e-2 of its
# dynamically scaled one.
INPUT_SCALES = [np.array([1 / 448]), np.array([3e-5])]

# H = 160: a whole 128-column block and a ragged one; I = 256: two blocks,
# one per rank at two ranks.
layer = moe_mlir.Layer(
    160, 256, 8,
    moe_mlir.Router("sigmoid", 2, num_groups=4, topk_groups=2,
                    renormalize=True, routed_scaling_factor=2.5,
                    num_shared_experts=1),
    correction_bias=True)

print(layer.tensor_parallel(2).intermediate_size,
      layer.tensor_parallel(4).intermediate_size,
      layer.tensor_parallel(2, "block").w13_scales_shape("block"),
      layer.tensor_parallel(1) == layer)
# CHECK: 128 64 (9, 2, 2) True


def describe(slices):
    """A shard's pieces as text: "gate->up" ranges of each dimension that
    is cut."""
    def text(index):
        return ",".join(f"{part.start}:{part.stop}" for part in index
                        if isinstance(part, slice) and part != slice(None))
    return " ".join(f"[{text(shard)}]<-[{text(full)}]"
                    for shard, full in slices)


for rank in range(2):
    slices = layer.shard_slices(2, rank, "block")
    print(rank, {name: describe(pieces) for name, pieces in slices.items()})
# CHECK: 0 {'w13': '[0:128]<-[0:128] [128:256]<-[256:384]', 'w2': '[0:128]<-[0:128]', 'w13_scales': '[0:1]<-[0:1] [1:2]<-[2:3]', 'w2_scales': '[0:1]<-[0:1]'}
# CHECK: 1 {'w13': '[0:128]<-[128:256] [128:256]<-[384:512]', 'w2': '[0:128]<-[128:256]', 'w13_scales': '[0:1]<-[1:2] [1:2]<-[3:4]', 'w2_scales': '[0:1]<-[1:2]'}
print({name: describe(pieces)
       for name, pieces in layer.shard_slices(4, 3, "channel").items()})
# CHECK: {'w13': '[0:64]<-[192:256] [64:128]<-[448:512]', 'w2': '[0:64]<-[192:256]', 'w13_scales': '[0:64]<-[192:256] [64:128]<-[448:512]', 'w2_scales': '[]<-[]'}


def shard(full, pieces, shape):
    """The shard of ``full`` that ``pieces`` (shard_slices) make, of
    ``shape``; every element must be written once."""
    written = np.zeros(shape, dtype=np.int64)
    values = np.zeros(shape)
    for shard_index, full_index in pieces:
        values[shard_index] = full[full_index]
        written[shard_index] += 1
    assert (written == 1).all(), "a shard element written twice or never"
    return values


def check_sum(quantization, world_size, rng, tokens=9):
    """The f32 layer on the CPU path against the sum of its ranks' layers,
    each on its shard of the same weights."""
    x = rng.uniform(-1, 1, (tokens, layer.hidden_size))
    logits = rng.uniform(-2, 2, (tokens, layer.num_experts))
    bias = rng.uniform(-0.1, 0.1, layer.num_experts)
    weights = {"w13": rng.uniform(-1, 1, layer.w13_shape)
               / np.sqrt(layer.hidden_size),
               "w2": rng.uniform(-1, 1, layer.w2_shape)
               / np.sqrt(layer.intermediate_size)}
    if quantization:
        weights["w13_scales"] = 2.0 ** rng.uniform(
            -6, -2, layer.w13_scales_shape(quantization))
        weights["w2_scales"] = 2.0 ** rng.uniform(
            -6, -2, layer.w2_scales_shape(quantization))
    names = list(weights)
    # Every rank holds the static input scales whole.
    statics = (INPUT_SCALES if moe_mlir.layers.is_static(quantization)
               else [])

    def run(of_layer, tensors):
        function = moe_mlir.CpuFunction.compile(of_layer.source(
            "f32", quantization))
        return function(x, logits, tensors["w13"], tensors["w2"], bias,
                        *[tensors[name] for name in names[2:]], *statics)

    full = run(layer, weights).astype(np.float64)
    rank_layer = layer.tensor_parallel(world_size, quantization)
    shapes = {"w13": rank_layer.w13_shape, "w2": rank_layer.w2_shape}
    if quantization:
        shapes["w13_scales"] = rank_layer.w13_scales_shape(quantization)
        shapes["w2_scales"] = rank_layer.w2_scales_shape(quantization)
    total = np.zeros_like(full)
    for rank in range(world_size):
        slices = layer.shard_slices(world_size, rank, quantization)
        assert list(slices) == names
        total += run(rank_layer, {name: shard(weights[name], slices[name],
                                              shapes[name])
                                  for name in names})
    error = np.abs(total - full).max() / np.abs(full).max()
    assert error <= TOLERANCE[quantization], (quantization, world_size,
                                              error)
    print(f"{quantization or 'f32'} weights, {world_size} ranks: the ranks "
          f"sum to the layer within {TOLERANCE[quantization]:g}")


rng = np.random.default_rng(19)
for quantization, world_sizes in ((None, (1, 2, 4)), ("block", (2,)),
                                  ("channel", (2, 4)), ("tensor", (2,)),
                                  ("channel-static", (2,)),
                                  ("tensor-static", (4,))):
    for world_size in world_sizes:
        check_sum(quantization, world_size, rng)
# CHECK: f32 weights, 1 ranks: the ranks sum to the layer within 1e-05
# CHECK: f32 weights, 2 ranks: the ranks sum to the layer within 1e-05
# CHECK: f32 weights, 4 ranks: the ranks sum to the layer within 1e-05
# CHECK: block weights, 2 ranks: the ranks sum to the layer within 1e-05
# CHECK: channel weights, 2 ranks: the ranks sum to the layer within 0.05
# CHECK: channel weights, 4 ranks: the ranks sum to the layer within 0.05
# CHECK: tensor weights, 2 ranks: the ranks sum to the layer within 0.05
# CHECK: channel-static weights, 2 ranks: the ranks sum to the layer within 1e-05
# CHECK: tensor-static weights, 4 ranks: the ranks sum to the layer within 1e-05

# One rank holds everything, ragged blocks included (DeepSeek-V3 reduced:
# I = 64, half a block).
deepseek = moe_mlir.Layer.preset("deepseek-v3", reduced=True)
print(deepseek.shard_slices(1, 0, "block"))
# CHECK: {'w13': [((Ellipsis,), (Ellipsis,))], 'w2': [((Ellipsis,), (Ellipsis,))], 'w13_scales': [((Ellipsis,), (Ellipsis,))], 'w2_scales': [((Ellipsis,), (Ellipsis,))]}
print(deepseek.tensor_parallel(2).intermediate_size)
# CHECK: 32

report("blocks astride ranks",
       lambda: deepseek.tensor_parallel(2, "block"))
# CHECK: blocks astride ranks: ValueError: 2 tensor-parallel ranks would hold intermediate_size 64 / 2 = 32 each, not a multiple of the 128 x 128 scale blocks: a block astride two ranks would need one scale for both
report("I not divisible",
       lambda: layer.shard_slices(3, 0))
# CHECK: I not divisible: ValueError: intermediate_size 256 is not divisible by 3 tensor-parallel ranks
report("rank beyond", lambda: layer.shard_slices(2, 2))
# CHECK: rank beyond: ValueError: rank 2 is not one of 2 tensor-parallel ranks
report("no ranks", lambda: layer.tensor_parallel(0))
# CHECK: no ranks: ValueError: world_size must be in [1, 2**63 - 1], got 0
report("world size type", lambda: layer.tensor_parallel(2.0))
# CHECK: world size type: TypeError: world_size must be an int, got float
report("quantization", lambda: layer.tensor_parallel(2, "row"))
# CHECK: quantization: ValueError: unknown quantization 'row' (tensor, channel, block, tensor-static, channel-static, mxfp4, or None for weights in the layer's dtype)
