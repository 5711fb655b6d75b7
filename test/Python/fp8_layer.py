# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t | FileCheck %s
"""moe_mlir.Layer with fp8 weights: the sources of a quantization (e4m3
weights, fp32 scales of the shapes w13_scales_shape and w2_scales_shape
give, ragged blocks included, after the correction bias; with static
activation scales the two [1] input scales after them; the
#moe.quantization), layer_bundle keyed by the quantization, and the errors
of a wrong one."""

import json
import os
import sys

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

work = sys.argv[1]

# DeepSeek-V3 reduced 32x: H = 224 (a 128-column block and a 96-column
# one), 2I = 128, I = 64.
deepseek = moe_mlir.Layer.preset("deepseek-v3", reduced=True)
for quantization in moe_mlir.layers.WEIGHT_SCALINGS:
    print(quantization, deepseek.w13_scales_shape(quantization),
          deepseek.w2_scales_shape(quantization))
# CHECK: tensor (257,) (257,)
# CHECK-NEXT: channel (257, 128) (257, 224)
# CHECK-NEXT: block (257, 1, 2) (257, 2, 1)
# Static activation scales leave the weights' scales as they are.
for quantization in moe_mlir.layers.STATIC_QUANTIZATIONS:
    print(quantization, moe_mlir.layers.weight_scaling(quantization),
          moe_mlir.layers.is_static(quantization),
          deepseek.w13_scales_shape(quantization),
          deepseek.w2_scales_shape(quantization))
# CHECK-NEXT: tensor-static tensor True (257,) (257,)
# CHECK-NEXT: channel-static channel True (257, 128) (257, 224)
print(moe_mlir.layers.weight_scaling("block"),
      moe_mlir.layers.is_static("block"), moe_mlir.layers.weight_scaling(None))
# CHECK-NEXT: block False
full = moe_mlir.Layer.preset("kimi-k2")
print(full.w13_scales_shape("block"), full.w2_scales_shape("block"))
# CHECK-NEXT: (385, 32, 56) (385, 56, 16)

print(deepseek.source("bf16", quantization="block"))
# CHECK-LABEL: func.func @layer(
# CHECK-SAME: %w13: tensor<257x128x224xf8E4M3FN>, %w2: tensor<257x224x64xf8E4M3FN>, %bias: tensor<256xf32>, %w13_scales: tensor<257x1x2xf32>, %w2_scales: tensor<257x2x1xf32>) -> tensor<?x224xbf16>
# CHECK: moe.fused_moe %x, %logits, %w13, %w2 bias(%bias) scales(%w13_scales, %w2_scales)
# CHECK-SAME: quantization = #moe.quantization<weights = block, activations = token_group, block_size = 128>

print(deepseek.experts_source("f16", quantization="channel"))
# CHECK-LABEL: func.func @experts(%x: tensor<?x224xf16>,
# CHECK-SAME: %w13: tensor<257x128x224xf8E4M3FN>, %w2: tensor<257x224x64xf8E4M3FN>, %w13_scales: tensor<257x128xf32>, %w2_scales: tensor<257x224xf32>)
# CHECK: {quantization = #moe.quantization<weights = channel, activations = token>}

print(deepseek.source("bf16", quantization="tensor-static"))
# CHECK-LABEL: func.func @layer(
# CHECK-SAME: %w13_scales: tensor<257xf32>, %w2_scales: tensor<257xf32>, %w13_input_scale: tensor<1xf32>, %w2_input_scale: tensor<1xf32>) -> tensor<?x224xbf16>
# CHECK: scales(%w13_scales, %w2_scales) input_scales(%w13_input_scale, %w2_input_scale)
# CHECK-SAME: quantization = #moe.quantization<weights = tensor, activations = static_tensor>

# Every source verifies, and None is the layer in its dtype.
for quantization in (None, *moe_mlir.layers.WEIGHT_SCALINGS,
                     *moe_mlir.layers.STATIC_QUANTIZATIONS):
    for part in (deepseek.source, deepseek.experts_source):
        moe_mlir.Module.parse(part("bf16", quantization))
assert "f8E4M3FN" not in deepseek.source("bf16", None)

# layer_bundle: the quantization is part of the key and of the name; the
# bundle takes the e4m3 weights and their scales last.
cache = os.path.join(work, "cache")
paths = {quantization: moe_mlir.layer_bundle(
    deepseek, quantization=quantization, part="experts", cache_dir=cache,
    tokens_max=64, token_buckets=(64,))
    for quantization in (None, "block", "channel", "channel-static")}
assert len(set(paths.values())) == 4
assert paths["block"] == moe_mlir.layer_bundle(
    deepseek, quantization="block", part="experts", cache_dir=cache,
    tokens_max=64, token_buckets=(64,))
print(sorted(os.path.basename(path).rsplit("-", 1)[0]
             for path in paths.values()))
# CHECK: ['experts-e257-h224-i64-bf16', 'experts-e257-h224-i64-bf16-fp8block', 'experts-e257-h224-i64-bf16-fp8channel', 'experts-e257-h224-i64-bf16-fp8channel-static']
with open(os.path.join(paths["block"], "layer.json")) as file:
    print(json.load(file)["quantization"])
# CHECK: block
with open(os.path.join(paths["block"], "manifest.txt")) as file:
    for line in file:
        if line.startswith("tensor"):
            print(line.rstrip())
# CHECK: tensor arg3 input f8e4m3 257 128 224
# CHECK-NEXT: tensor arg4 input f8e4m3 257 224 64
# CHECK-NEXT: tensor arg5 input f32 257 1 2
# CHECK-NEXT: tensor arg6 input f32 257 2 1
# CHECK-NEXT: tensor result0 output bf16 T 224
with open(os.path.join(paths["channel-static"], "manifest.txt")) as file:
    for line in [line for line in file if line.startswith("tensor ")][-4:]:
        print(line.rstrip())
# CHECK: tensor arg6 input f32 257 224
# CHECK-NEXT: tensor arg7 input f32 1
# CHECK-NEXT: tensor arg8 input f32 1
# CHECK-NEXT: tensor result0 output bf16 T 224

report("unknown", lambda: deepseek.source("bf16", quantization="fp8"))
# CHECK: unknown: ValueError: unknown quantization 'fp8' (tensor, channel, block, tensor-static, channel-static, mxfp4, or None for weights in the layer's dtype)
report("static blocks", lambda: deepseek.source("bf16",
                                                quantization="block-static"))
# CHECK: static blocks: ValueError: unknown quantization 'block-static' 
report("not a str", lambda: moe_mlir.layer_bundle(deepseek, quantization=True,
                                                  cache_dir=cache))
# CHECK: not a str: TypeError: quantization must be a str or None, got bool
report("no scales", lambda: deepseek.w13_scales_shape(None))
# CHECK: no scales: ValueError: weights in the layer's dtype have no scales; give a quantization (tensor, channel, block, tensor-static, channel-static, mxfp4)
