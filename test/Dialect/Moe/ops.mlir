// Round-trip of every moe op and attribute: print, re-parse, print again.
// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s

// CHECK-LABEL: func @fused_experts
// CHECK: moe.fused_experts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} activation(gelu_and_mul)
// CHECK-SAME: (tensor<?x256xf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16x64x256xf16>, tensor<16x256x32xf16>) -> tensor<?x256xf16>
func.func @fused_experts(%x: tensor<?x256xf16>, %ids: tensor<?x4xi32>,
                         %w: tensor<?x4xf32>, %w13: tensor<16x64x256xf16>,
                         %w2: tensor<16x256x32xf16>) -> tensor<?x256xf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(gelu_and_mul)
       : (tensor<?x256xf16>, tensor<?x4xi32>, tensor<?x4xf32>,
          tensor<16x64x256xf16>, tensor<16x256x32xf16>) -> tensor<?x256xf16>
  return %y : tensor<?x256xf16>
}

// CHECK-LABEL: func @fused_moe_deepseek
// CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}}) activation(silu_and_mul)
// CHECK-SAME: router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4, renormalize = true, routed_scaling_factor = 2.500000e+00, num_shared_experts = 1>
// CHECK-SAME: (tensor<?x256xbf16>, tensor<?x256xf32>, tensor<257x64x256xbf16>, tensor<257x256x32xbf16>, tensor<256xf32>) -> tensor<?x256xbf16>
func.func @fused_moe_deepseek(%x: tensor<?x256xbf16>, %logits: tensor<?x256xf32>,
                              %w13: tensor<257x64x256xbf16>,
                              %w2: tensor<257x256x32xbf16>,
                              %bias: tensor<256xf32>) -> tensor<?x256xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 bias(%bias) activation(silu_and_mul) {
         router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8,
                              topk_groups = 4, renormalize = true,
                              routed_scaling_factor = 2.5, num_shared_experts = 1>}
       : (tensor<?x256xbf16>, tensor<?x256xf32>, tensor<257x64x256xbf16>,
          tensor<257x256x32xbf16>, tensor<256xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// Defaults are elided when printed.
// CHECK-LABEL: func @fused_moe_mixtral
// CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} activation(gelu_and_mul)
// CHECK-SAME: {router = #moe.router<scoring = softmax, top_k = 2>}
// CHECK-SAME: (tensor<4x64xf16>, tensor<4x8xf16>, tensor<8x32x64xf16>, tensor<8x64x16xf16>) -> tensor<4x64xf16>
func.func @fused_moe_mixtral(%x: tensor<4x64xf16>, %logits: tensor<4x8xf16>,
                             %w13: tensor<8x32x64xf16>,
                             %w2: tensor<8x64x16xf16>) -> tensor<4x64xf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 activation(gelu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, num_groups = 1>}
       : (tensor<4x64xf16>, tensor<4x8xf16>, tensor<8x32x64xf16>,
          tensor<8x64x16xf16>) -> tensor<4x64xf16>
  return %y : tensor<4x64xf16>
}

// gpt-oss: expert biases (any float type) and the clamped SwiGLU.
// CHECK-LABEL: func @fused_moe_gpt_oss
// CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} biases(%{{.*}}, %{{.*}}) activation(clamped_swiglu)
// CHECK-SAME: swiglu = #moe.swiglu<alpha = 1.702000e+00, limit = 7.000000e+00>
// CHECK-SAME: (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<8x32xbf16>, tensor<8x64xf32>) -> tensor<?x64xbf16>
// CHECK: moe.fused_experts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} biases(%{{.*}}, %{{.*}}) activation(clamped_swiglu)
// CHECK-SAME: swiglu = #moe.swiglu<alpha = 1.000000e+00, limit = 2.500000e+00>
func.func @fused_moe_gpt_oss(%x: tensor<?x64xbf16>, %logits: tensor<?x8xf32>,
                             %w13: tensor<8x32x64xbf16>,
                             %w2: tensor<8x64x16xbf16>,
                             %b13: tensor<8x32xbf16>, %b2: tensor<8x64xf32>,
                             %ids: tensor<?x4xi32>, %w: tensor<?x4xf32>)
    -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %y = moe.fused_moe %x, %logits, %w13, %w2 biases(%b13, %b2)
         activation(clamped_swiglu)
         {router = #moe.router<scoring = softmax, top_k = 4, renormalize = true>,
          swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
       : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x32x64xbf16>,
          tensor<8x64x16xbf16>, tensor<8x32xbf16>, tensor<8x64xf32>)
         -> tensor<?x64xbf16>
  %z = moe.fused_experts %x, %ids, %w, %w13, %w2 biases(%b13, %b2)
         activation(clamped_swiglu)
         {swiglu = #moe.swiglu<alpha = 1.0, limit = 2.5>}
       : (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>,
          tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<8x32xbf16>,
          tensor<8x64xf32>) -> tensor<?x64xbf16>
  return %y, %z : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// CHECK-LABEL: func @grouped_matmul_bias
// CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}}) input(token) output(sorted) activation(clamped_swiglu)
// CHECK-SAME: swiglu = #moe.swiglu<alpha = 1.702000e+00, limit = 7.000000e+00>
func.func @grouped_matmul_bias(%x: tensor<3x64xbf16>, %w13: tensor<8x64x64xbf16>,
                               %b: tensor<8x64xf32>, %s: tensor<?xi32>,
                               %e: tensor<?xi32>, %n: tensor<i32>)
    -> tensor<?x32xbf16> {
  %h = moe.grouped_matmul %x, %w13, %s, %e, %n bias(%b) input(token)
         output(sorted) activation(clamped_swiglu)
         {block_m = 16, num_slots = 2,
          swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
       : (tensor<3x64xbf16>, tensor<8x64x64xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<8x64xf32>) -> tensor<?x32xbf16>
  return %h : tensor<?x32xbf16>
}

// CHECK-LABEL: func @gate
// CHECK: moe.gate %{{.*}} bias %{{.*}} {router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4>}
// CHECK-SAME: (tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>)
// CHECK: moe.gate %{{.*}} {router = #moe.router<scoring = softmax, top_k = 8, renormalize = true>}
// CHECK-SAME: (tensor<7x384xbf16>) -> (tensor<7x8xf32>, tensor<7x8xi32>)
func.func @gate(%logits: tensor<?x256xf32>, %bias: tensor<256xf32>,
                %kimi: tensor<7x384xbf16>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<7x8xf32>, tensor<7x8xi32>) {
  %w, %ids = moe.gate %logits bias %bias {
      router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8,
                           topk_groups = 4>}
    : (tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>)
  %kw, %kids = moe.gate %kimi {
      router = #moe.router<scoring = softmax, top_k = 8, renormalize = true>}
    : (tensor<7x384xbf16>) -> (tensor<7x8xf32>, tensor<7x8xi32>)
  return %w, %ids, %kw, %kids
    : tensor<?x8xf32>, tensor<?x8xi32>, tensor<7x8xf32>, tensor<7x8xi32>
}

// Capacity 3*2 + 8*(16-1) = 126 rows in 8 blocks of 16.
// CHECK-LABEL: func @route
// CHECK: moe.route %{{.*}} {block_m = 16 : i64, num_experts = 8 : i64}
// CHECK-SAME: (tensor<3x2xi32>) -> (tensor<126xi32>, tensor<8xi32>, tensor<i32>)
// CHECK: moe.route %{{.*}} {block_m = 64 : i64, num_experts = 128 : i64}
// CHECK-SAME: (tensor<?x8xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
func.func @route(%ids: tensor<3x2xi32>, %dyn: tensor<?x8xi32>)
    -> (tensor<126xi32>, tensor<8xi32>, tensor<i32>) {
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 16}
    : (tensor<3x2xi32>) -> (tensor<126xi32>, tensor<8xi32>, tensor<i32>)
  %ds, %de, %dn = moe.route %dyn {num_experts = 128, block_m = 64}
    : (tensor<?x8xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %s, %e, %n : tensor<126xi32>, tensor<8xi32>, tensor<i32>
}

// CHECK-LABEL: func @grouped_matmul
// CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} input(token) output(sorted) activation(silu_and_mul)
// CHECK-SAME: config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 4>
// CHECK-SAME: -> tensor<126x32xbf16>
// CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} routed_weights(%{{.*}}) input(sorted) output(slot)
// CHECK-NOT: activation
// CHECK-SAME: config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 32, num_stages = 3, num_warpgroups = 2, split_k = 4, tma_a = true, tma_b = false, cluster_m = 2, persistent = true>
// CHECK-SAME: -> tensor<3x2x64xf32>
// CHECK: moe.grouped_matmul {{.*}} input(token) output(slot) activation(gelu_and_mul)
// CHECK-SAME: (tensor<?x64xbf16>, tensor<8x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x2x32xbf16>
func.func @grouped_matmul(%x: tensor<3x64xbf16>, %w13: tensor<8x64x64xbf16>,
                          %w2: tensor<8x64x32xbf16>, %sorted: tensor<126xi32>,
                          %experts: tensor<8xi32>, %count: tensor<i32>,
                          %weights: tensor<3x2xf32>, %dx: tensor<?x64xbf16>,
                          %dsorted: tensor<?xi32>, %dexperts: tensor<?xi32>)
    -> (tensor<3x2x64xf32>, tensor<?x2x32xbf16>) {
  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
         input(token) output(sorted) activation(silu_and_mul)
         {block_m = 16, num_slots = 2,
          config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64,
                                    num_stages = 4>}
       : (tensor<3x64xbf16>, tensor<8x64x64xbf16>, tensor<126xi32>,
          tensor<8xi32>, tensor<i32>) -> tensor<126x32xbf16>
  %o = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
         routed_weights(%weights) input(sorted) output(slot)
         {block_m = 16, num_slots = 2,
          config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 32,
                                    num_stages = 3, num_warpgroups = 2,
                                    split_k = 4, tma_a = true, tma_b = false,
                                    cluster_m = 2, cluster_n = 1,
                                    persistent = true>}
       : (tensor<126x32xbf16>, tensor<8x64x32xbf16>, tensor<126xi32>,
          tensor<8xi32>, tensor<i32>, tensor<3x2xf32>) -> tensor<3x2x64xf32>
  %g = moe.grouped_matmul %dx, %w13, %dsorted, %dexperts, %count
         input(token) output(slot) activation(gelu_and_mul)
         {block_m = 16, num_slots = 2}
       : (tensor<?x64xbf16>, tensor<8x64x64xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>) -> tensor<?x2x32xbf16>
  return %o, %g : tensor<3x2x64xf32>, tensor<?x2x32xbf16>
}

// CHECK-LABEL: func @combine
// CHECK: moe.combine %{{.*}} : (tensor<?x9x64xbf16>) -> tensor<?x64xbf16>
// CHECK: moe.combine %{{.*}} weights(%{{.*}}) : (tensor<3x2x64xf32>, tensor<3x2xf32>) -> tensor<3x64xf32>
// CHECK: moe.combine %{{.*}} weights(%{{.*}}) ids(%{{.*}}) {num_experts = 8 : i64} : (tensor<3x2x64xf32>, tensor<3x2xf32>, tensor<3x2xi32>) -> tensor<3x64xf32>
func.func @combine(%rows: tensor<?x9x64xbf16>, %r: tensor<3x2x64xf32>,
                   %w: tensor<3x2xf32>, %ids: tensor<3x2xi32>)
    -> (tensor<?x64xbf16>, tensor<3x64xf32>, tensor<3x64xf32>) {
  %y = moe.combine %rows : (tensor<?x9x64xbf16>) -> tensor<?x64xbf16>
  %z = moe.combine %r weights(%w)
       : (tensor<3x2x64xf32>, tensor<3x2xf32>) -> tensor<3x64xf32>
  %m = moe.combine %r weights(%w) ids(%ids) {num_experts = 8}
       : (tensor<3x2x64xf32>, tensor<3x2xf32>, tensor<3x2xi32>)
         -> tensor<3x64xf32>
  return %y, %z, %m : tensor<?x64xbf16>, tensor<3x64xf32>, tensor<3x64xf32>
}

// CHECK-LABEL: func @tensor_maps
// CHECK: %[[W_MAP:.*]] = moe.tensor_map %{{.*}} : tensor<8x64x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
// CHECK: %[[H_MAP:.*]] = moe.tensor_map %{{.*}} : tensor<?x64xbf16> -> !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>
// CHECK: moe.grouped_matmul {{.*}} input_map(%[[H_MAP]]) weights_map(%[[W_MAP]]) input(sorted) output(sorted)
func.func @tensor_maps(%h: tensor<?x64xbf16>, %w: tensor<8x64x64xbf16>,
                       %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                       %count: tensor<i32>) -> tensor<?x64xbf16> {
  %w_map = moe.tensor_map %w : tensor<8x64x64xbf16>
             -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
  %h_map = moe.tensor_map %h : tensor<?x64xbf16>
             -> !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>
  %o = moe.grouped_matmul %h, %w, %sorted, %experts, %count
         input_map(%h_map) weights_map(%w_map) input(sorted) output(sorted)
         {block_m = 64, num_slots = 2,
          config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64,
                                    num_stages = 4, tma_a = true>}
       : (tensor<?x64xbf16>, tensor<8x64x64xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>,
          !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>,
          !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>)
       -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// FP8 weights: the layer, its experts, a scaled grouped matmul, quantize.

// CHECK-LABEL: func @fused_moe_fp8_block
// CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}}) scales(%{{.*}}, %{{.*}}) activation(silu_and_mul)
// CHECK-SAME: quantization = #moe.quantization<weights = block, activations = token_group>
// CHECK-SAME: tensor<17x192x256xf8E4M3FN>, tensor<17x256x96xf8E4M3FN>, tensor<16xf32>, tensor<17x2x2xf32>, tensor<17x2x1xf32>) -> tensor<?x256xbf16>
func.func @fused_moe_fp8_block(%x: tensor<?x256xbf16>, %logits: tensor<?x16xf32>,
                               %w13: tensor<17x192x256xf8E4M3FN>,
                               %w2: tensor<17x256x96xf8E4M3FN>,
                               %bias: tensor<16xf32>, %s13: tensor<17x2x2xf32>,
                               %s2: tensor<17x2x1xf32>) -> tensor<?x256xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 bias(%bias) scales(%s13, %s2)
         activation(silu_and_mul) {
         router = #moe.router<scoring = sigmoid, top_k = 4, num_groups = 4,
                              topk_groups = 2, num_shared_experts = 1>,
         quantization = #moe.quantization<weights = block, activations = token_group, block_size = 128>}
       : (tensor<?x256xbf16>, tensor<?x16xf32>, tensor<17x192x256xf8E4M3FN>,
          tensor<17x256x96xf8E4M3FN>, tensor<16xf32>, tensor<17x2x2xf32>,
          tensor<17x2x1xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// CHECK-LABEL: func @fused_experts_fp8_channel
// CHECK: moe.fused_experts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) activation(silu_and_mul)
// CHECK-SAME: quantization = #moe.quantization<weights = channel, activations = token, block_size = 64>
func.func @fused_experts_fp8_channel(%x: tensor<?x256xf16>, %ids: tensor<?x2xi32>,
                                     %w: tensor<?x2xf32>,
                                     %w13: tensor<8x64x256xf8E4M3FN>,
                                     %w2: tensor<8x256x32xf8E4M3FN>,
                                     %s13: tensor<8x64xf32>,
                                     %s2: tensor<8x256xf32>) -> tensor<?x256xf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul) {
         quantization = #moe.quantization<weights = channel, activations = token, block_size = 64>}
       : (tensor<?x256xf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>,
          tensor<8x64xf32>, tensor<8x256xf32>) -> tensor<?x256xf16>
  return %y : tensor<?x256xf16>
}

// CHECK-LABEL: func @fused_moe_fp8_static
// CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) input_scales(%{{.*}}, %{{.*}}) activation(silu_and_mul)
// CHECK-SAME: quantization = #moe.quantization<weights = tensor, activations = static_tensor>
// CHECK-SAME: tensor<8xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x256xbf16>
func.func @fused_moe_fp8_static(%x: tensor<?x256xbf16>, %logits: tensor<?x8xf32>,
                                %w13: tensor<8x192x256xf8E4M3FN>,
                                %w2: tensor<8x256x96xf8E4M3FN>,
                                %s13: tensor<8xf32>, %s2: tensor<8xf32>,
                                %a13: tensor<1xf32>, %a2: tensor<1xf32>)
    -> tensor<?x256xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(silu_and_mul) {
         router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
         quantization = #moe.quantization<weights = tensor, activations = static_tensor>}
       : (tensor<?x256xbf16>, tensor<?x8xf32>, tensor<8x192x256xf8E4M3FN>,
          tensor<8x256x96xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>,
          tensor<1xf32>, tensor<1xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// CHECK-LABEL: func @fused_experts_fp8_static
// CHECK: moe.fused_experts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) input_scales(%{{.*}}, %{{.*}}) activation(gelu_and_mul)
// CHECK-SAME: quantization = #moe.quantization<weights = channel, activations = static_tensor>
func.func @fused_experts_fp8_static(%x: tensor<?x256xf16>, %ids: tensor<?x2xi32>,
                                    %w: tensor<?x2xf32>,
                                    %w13: tensor<8x64x256xf8E4M3FN>,
                                    %w2: tensor<8x256x32xf8E4M3FN>,
                                    %s13: tensor<8x64xf32>, %s2: tensor<8x256xf32>,
                                    %a13: tensor<1xf32>, %a2: tensor<1xf32>)
    -> tensor<?x256xf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(gelu_and_mul) {
         quantization = #moe.quantization<weights = channel, activations = static_tensor>}
       : (tensor<?x256xf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>,
          tensor<8x64xf32>, tensor<8x256xf32>, tensor<1xf32>, tensor<1xf32>)
       -> tensor<?x256xf16>
  return %y : tensor<?x256xf16>
}

// CHECK-LABEL: func @quantize_static
// CHECK: %[[Q:.*]], %[[S:.*]] = moe.quantize %{{.*}} scale(%{{.*}}) rows(%{{.*}}) {group_size = 256 : i64}
// CHECK-SAME: (tensor<?x256xbf16>, tensor<1xf32>, tensor<i32>) -> (tensor<?x256xf8E4M3FN>, tensor<?x1xf32>)
// CHECK: moe.grouped_matmul %[[Q]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%[[S]], %{{.*}}) input(sorted) output(sorted)
// CHECK-SAME: quantization = #moe.quantization<weights = tensor, activations = static_tensor>
func.func @quantize_static(%h: tensor<?x256xbf16>, %a: tensor<1xf32>,
                           %w: tensor<4x64x256xf8E4M3FN>, %ws: tensor<4xf32>,
                           %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                           %n: tensor<i32>) -> tensor<?x64xbf16> {
  %q, %s = moe.quantize %h scale(%a) rows(%n) {group_size = 256}
         : (tensor<?x256xbf16>, tensor<1xf32>, tensor<i32>)
           -> (tensor<?x256xf8E4M3FN>, tensor<?x1xf32>)
  %o = moe.grouped_matmul %q, %w, %sorted, %experts, %n scales(%s, %ws)
         input(sorted) output(sorted)
         {block_m = 64, num_slots = 2,
          quantization = #moe.quantization<weights = tensor, activations = static_tensor>}
       : (tensor<?x256xf8E4M3FN>, tensor<4x64x256xf8E4M3FN>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x1xf32>, tensor<4xf32>)
       -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// CHECK-LABEL: func @grouped_matmul_fp8
// CHECK: moe.quantize %{{.*}} rows(%{{.*}}) {group_size = 128 : i64}
// CHECK-SAME: (tensor<?x256xbf16>, tensor<i32>) -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>)
// CHECK: %[[TQ:.*]], %[[TS:.*]] = moe.quantize %{{.*}} {group_size = 256 : i64}
// CHECK: moe.grouped_matmul %[[TQ]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} routed_weights(%{{.*}}) scales(%[[TS]], %{{.*}}) input(sorted) output(slot)
// CHECK-SAME: quantization = #moe.quantization<weights = tensor, activations = token>
func.func @grouped_matmul_fp8(%h: tensor<?x256xbf16>, %w: tensor<4x64x256xf8E4M3FN>,
                              %ws: tensor<4xf32>, %sorted: tensor<?xi32>,
                              %experts: tensor<?xi32>, %n: tensor<i32>,
                              %rw: tensor<?x2xf32>) -> tensor<?x2x64xbf16> {
  %q, %s = moe.quantize %h rows(%n) {group_size = 128}
         : (tensor<?x256xbf16>, tensor<i32>) -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>)
  %tq, %ts = moe.quantize %h {group_size = 256}
         : (tensor<?x256xbf16>) -> (tensor<?x256xf8E4M3FN>, tensor<?x1xf32>)
  %o = moe.grouped_matmul %tq, %w, %sorted, %experts, %n routed_weights(%rw)
         scales(%ts, %ws) input(sorted) output(slot)
         {block_m = 64, num_slots = 2,
          quantization = #moe.quantization<weights = tensor, activations = token>}
       : (tensor<?x256xf8E4M3FN>, tensor<4x64x256xf8E4M3FN>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<?x1xf32>,
          tensor<4xf32>) -> tensor<?x2x64xbf16>
  return %o : tensor<?x2x64xbf16>
}

// MXFP4 weights (weight-only): the layer, and a grouped matmul taking only
// weight scales.

// CHECK-LABEL: func @fused_moe_mxfp4
// CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) activation(silu_and_mul)
// CHECK-SAME: quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>
// CHECK-SAME: tensor<4x128x32xi8>, tensor<4x64x32xi8>, tensor<4x128x2xf8E8M0FNU>, tensor<4x64x2xf8E8M0FNU>) -> tensor<?x64xbf16>
func.func @fused_moe_mxfp4(%x: tensor<?x64xbf16>, %logits: tensor<?x4xf32>,
                           %w13: tensor<4x128x32xi8>, %w2: tensor<4x64x32xi8>,
                           %s13: tensor<4x128x2xf8E8M0FNU>,
                           %s2: tensor<4x64x2xf8E8M0FNU>) -> tensor<?x64xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul) {
         router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
         quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<4x128x32xi8>,
          tensor<4x64x32xi8>, tensor<4x128x2xf8E8M0FNU>,
          tensor<4x64x2xf8E8M0FNU>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// gpt-oss's MXFP4 layer: expert biases [E, 2I] and [E, H] beside packed
// weights, whose last dimension is K/2.

// CHECK-LABEL: func @fused_experts_mxfp4_biases
// CHECK: moe.fused_experts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} biases(%{{.*}}, %{{.*}}) scales(%{{.*}}, %{{.*}}) activation(clamped_swiglu)
// CHECK-SAME: tensor<4x128x32xi8>, tensor<4x64x32xi8>, tensor<4x128xbf16>, tensor<4x64xbf16>, tensor<4x128x2xf8E8M0FNU>, tensor<4x64x2xf8E8M0FNU>) -> tensor<?x64xbf16>
func.func @fused_experts_mxfp4_biases(
    %x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
    %w13: tensor<4x128x32xi8>, %w2: tensor<4x64x32xi8>,
    %b13: tensor<4x128xbf16>, %b2: tensor<4x64xbf16>,
    %s13: tensor<4x128x2xf8E8M0FNU>,
    %s2: tensor<4x64x2xf8E8M0FNU>) -> tensor<?x64xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 biases(%b13, %b2)
         scales(%s13, %s2) activation(clamped_swiglu) {
         swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>,
         quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<4x128x32xi8>, tensor<4x64x32xi8>, tensor<4x128xbf16>,
          tensor<4x64xbf16>, tensor<4x128x2xf8E8M0FNU>,
          tensor<4x64x2xf8E8M0FNU>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// CHECK-LABEL: func @grouped_matmul_mxfp4
// CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight_scales(%{{.*}}) input(token) output(sorted) activation(silu_and_mul)
func.func @grouped_matmul_mxfp4(%x: tensor<?x64xbf16>, %w: tensor<4x128x32xi8>,
                                %ws: tensor<4x128x2xf8E8M0FNU>,
                                %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                                %n: tensor<i32>) -> tensor<?x64xbf16> {
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n weight_scales(%ws)
         input(token) output(sorted) activation(silu_and_mul)
         {block_m = 64, num_slots = 2,
          quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x64xbf16>, tensor<4x128x32xi8>, tensor<?xi32>, tensor<?xi32>,
          tensor<i32>, tensor<4x128x2xf8E8M0FNU>) -> tensor<?x64xbf16>
  return %h : tensor<?x64xbf16>
}

// Expert parallel: rank 1 of 2 of a layer of 8 routed experts and a shared
// one holds 4 + 1; its exchange ops over receive buffers of C = 4 rows per
// (local expert, source rank).
// CHECK-LABEL: func @expert_parallel_layer
// CHECK: moe.fused_moe
// CHECK-SAME: expert_parallel = #moe.expert_parallel<world = 2, rank = 1>
// CHECK-SAME: (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<5x256x64xbf16>, tensor<5x64x128xbf16>) -> tensor<4x64xbf16>
func.func @expert_parallel_layer(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>,
    %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>) -> tensor<4x64xbf16> {
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>,
          expert_parallel = #moe.expert_parallel<world = 2, rank = 1>}
       : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<5x256x64xbf16>,
          tensor<5x64x128xbf16>) -> tensor<4x64xbf16>
  return %y : tensor<4x64xbf16>
}

// CHECK-LABEL: func @expert_parallel_exchange
// CHECK: moe.ep_dispatch %{{.*}}, %{{.*}}, %{{.*}} into(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, num_experts = 8 : i64}
// CHECK-SAME: -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>)
// CHECK: moe.ep_route %{{.*}} {block_m = 1 : i64} : (tensor<5x2xi32>) -> (tensor<40xi32>, tensor<40xi32>, tensor<i32>)
// CHECK: moe.ep_route %{{.*}} {block_m = 16 : i64} : (tensor<5x2xi32>) -> (tensor<115xi32>, tensor<8xi32>, tensor<i32>)
// CHECK: moe.ep_combine %{{.*}}, %{{.*}}, %{{.*}} into(%{{.*}})
// CHECK-SAME: -> tensor<2x4x3x64xbf16>
func.func @expert_parallel_exchange(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>,
    %w: tensor<4x3xf32>, %rows: tensor<2x40x64xbf16>, %weights: tensor<2x40xf32>,
    %slots: tensor<2x40xi32>, %counts: tensor<2x5x2xi32>, %out: tensor<40x64xbf16>,
    %mine: tensor<40xi32>, %my_counts: tensor<5x2xi32>, %returned: tensor<2x4x3x64xbf16>)
    -> tensor<2x4x3x64xbf16> {
  %r, %rw, %rs, %rc = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, num_experts = 8}
    : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x40x64xbf16>,
       tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>)
      -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>)
  %sorted, %experts, %n = moe.ep_route %my_counts {block_m = 1}
    : (tensor<5x2xi32>) -> (tensor<40xi32>, tensor<40xi32>, tensor<i32>)
  %blocked:3 = moe.ep_route %my_counts {block_m = 16}
    : (tensor<5x2xi32>) -> (tensor<115xi32>, tensor<8xi32>, tensor<i32>)
  %back = moe.ep_combine %out, %mine, %my_counts into(%returned)
    : (tensor<40x64xbf16>, tensor<40xi32>, tensor<5x2xi32>, tensor<2x4x3x64xbf16>)
      -> tensor<2x4x3x64xbf16>
  return %back : tensor<2x4x3x64xbf16>
}

// The completion flags of an exchange: a rank's signal, and its waits with
// and without guarded buffers.
// CHECK-LABEL: func @expert_parallel_completion
// CHECK: moe.ep_signal into(%{{.*}}) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>} : (tensor<2x2xi32>) -> tensor<2x2xi32>
// CHECK: moe.ep_wait %{{.*}} into(%{{.*}}) guards(%{{.*}}, %{{.*}}) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 1 : i64}
// CHECK-SAME: -> (tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>)
// CHECK: moe.ep_wait %{{.*}} into(%{{.*}}) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 2 : i64} : (tensor<2x2xi32>, tensor<2xi32>) -> tensor<2xi32>
func.func @expert_parallel_completion(%flags: tensor<2x2xi32>,
    %status: tensor<2xi32>, %rows: tensor<2x40x64xbf16>,
    %counts: tensor<2x5x2xi32>)
    -> (tensor<2x2xi32>, tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>) {
  %signalled = moe.ep_signal into(%flags)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>}
    : (tensor<2x2xi32>) -> tensor<2x2xi32>
  %waited, %ready:2 = moe.ep_wait %flags into(%status) guards(%rows, %counts)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 1}
    : (tensor<2x2xi32>, tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>)
      -> (tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>)
  %again = moe.ep_wait %flags into(%waited)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 2}
    : (tensor<2x2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return %signalled, %again, %ready#0, %ready#1
    : tensor<2x2xi32>, tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>
}
