# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t | FileCheck %s
"""moe_mlir.Layer with MXFP4 weights (quantization "mxfp4"): the stored and
scale shapes of gpt-oss's layers, the sources (packed i8 weights, e8m0
scales last, after the expert biases), layer_bundle keyed and named by the
quantization (its manifest takes both codes and scales as u8),
tensor-parallel shards in whole 32-blocks of I, and the refusals."""

import json
import os
import sys

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

work = sys.argv[1]

for name in ("gpt-oss-20b", "gpt-oss-120b"):
    layer = moe_mlir.Layer.preset(name)
    print(name, layer.w13_stored_shape("mxfp4"), layer.w2_stored_shape("mxfp4"),
          layer.w13_scales_shape("mxfp4"), layer.w2_scales_shape("mxfp4"),
          layer.w13_stored_shape() == layer.w13_shape)
# CHECK: gpt-oss-20b (32, 5760, 1440) (32, 2880, 1440) (32, 5760, 90) (32, 2880, 90) True
# CHECK-NEXT: gpt-oss-120b (128, 5760, 1440) (128, 2880, 1440) (128, 5760, 90) (128, 2880, 90) True

# gpt-oss's routing, biases and clamped SwiGLU at H = 96, I = 64.
small = moe_mlir.Layer(96, 64, 8, moe_mlir.Router("softmax", 4,
                                                  renormalize=True),
                       swiglu=(1.702, 7.0), expert_biases=True)
print(small.source("bf16", quantization="mxfp4"))
# CHECK-LABEL: func.func @layer(
# CHECK-SAME: %w13: tensor<8x128x48xi8>, %w2: tensor<8x96x32xi8>, %w13_bias: tensor<8x128xbf16>, %w2_bias: tensor<8x96xbf16>, %w13_scales: tensor<8x128x3xf8E8M0FNU>, %w2_scales: tensor<8x96x2xf8E8M0FNU>)
# CHECK: biases(%w13_bias, %w2_bias) scales(%w13_scales, %w2_scales) activation(clamped_swiglu)
# CHECK-SAME: quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>
moe_mlir.Module.parse(small.experts_source("bf16", "mxfp4"))

cache = os.path.join(work, "cache")
path = moe_mlir.layer_bundle(small, quantization="mxfp4", cache_dir=cache,
                             tokens_max=64, token_buckets=(64,))
print(os.path.basename(path).rsplit("-", 1)[0])
# CHECK: layer-e8-h96-i64-bf16-mxfp4
assert path != moe_mlir.layer_bundle(small, cache_dir=cache, tokens_max=64,
                                     token_buckets=(64,))
with open(os.path.join(path, "layer.json")) as file:
    print(json.load(file)["quantization"])
# CHECK: mxfp4
with open(os.path.join(path, "manifest.txt")) as file:
    for line in file:
        if line.startswith("tensor"):
            print(line.rstrip())
# CHECK: tensor arg0 input bf16 T 96
# CHECK-NEXT: tensor arg1 input f32 T 8
# CHECK-NEXT: tensor arg2 input u8 8 128 48
# CHECK-NEXT: tensor arg3 input u8 8 96 32
# CHECK-NEXT: tensor arg4 input bf16 8 128
# CHECK-NEXT: tensor arg5 input bf16 8 96
# CHECK-NEXT: tensor arg6 input u8 8 128 3
# CHECK-NEXT: tensor arg7 input u8 8 96 2
# CHECK-NEXT: tensor result0 output bf16 T 96


def describe(slices):
    """A shard's pieces as text: the ranges of each dimension that is
    cut."""
    def text(index):
        return ",".join(f"{part.start}:{part.stop}" for part in index
                        if isinstance(part, slice) and part != slice(None))
    return " ".join(f"[{text(shard)}]<-[{text(full)}]"
                    for shard, full in slices)


# Without expert biases (each rank would add w2's): I = 64 is two blocks.
unbiased = moe_mlir.Layer(96, 64, 8, moe_mlir.Router("softmax", 4))
print(unbiased.tensor_parallel(2, "mxfp4").w2_stored_shape("mxfp4"),
      unbiased.tensor_parallel(2, "mxfp4").w2_scales_shape("mxfp4"))
# CHECK: (8, 96, 16) (8, 96, 1)
print({name: describe(pieces)
       for name, pieces in unbiased.shard_slices(2, 1, "mxfp4").items()})
# CHECK: {'w13': '[0:32]<-[32:64] [32:64]<-[96:128]', 'w2': '[0:16]<-[16:32]', 'w13_scales': '[0:32]<-[32:64] [32:64]<-[96:128]', 'w2_scales': '[0:1]<-[1:2]'}
report("blocks astride ranks",
       lambda: unbiased.tensor_parallel(4, "mxfp4"))
# CHECK: blocks astride ranks: ValueError: 4 tensor-parallel ranks would hold intermediate_size 64 / 4 = 16 each, not a multiple of the mxfp4 blocks of 32 values: a block astride two ranks would need one scale for both
report("biases on two ranks", lambda: small.tensor_parallel(2, "mxfp4"))
# CHECK: biases on two ranks: NotImplementedError: tensor parallel with expert biases: every rank would add w2_bias to the reduced output
