// moe-decompose rewrites moe.fused_moe into gate -> route -> grouped_matmul
// (w13, token rows, gated activation) -> grouped_matmul (w2, routed weights,
// slot order) -> combine, sizing the routing buffers from block-m.
// RUN: moe-opt %s --moe-decompose --split-input-file | FileCheck %s
// RUN: moe-opt %s --moe-decompose="block-m=16" --split-input-file | FileCheck %s --check-prefix=BM16
// RUN: not moe-opt %s --moe-decompose="block-m=-1" --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not moe-opt %s --moe-decompose="tokens=4611686018427387904" --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD-TOKENS
// RUN: not moe-opt %s --moe-decompose="block-m=268435456" --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD-ROWS
// RUN: moe-opt %s --moe-decompose="block-m=0 tokens=256" --split-input-file | FileCheck %s --check-prefix=AUTO128
// RUN: moe-opt %s --moe-decompose="block-m=0 tokens=255" --split-input-file | FileCheck %s --check-prefix=AUTO64
// RUN: moe-opt %s --moe-decompose="block-m=0 tokens=256" --split-input-file | FileCheck %s --check-prefix=AUTO-FP8
// RUN: moe-opt %s --moe-decompose="block-m=0 tokens=512" --split-input-file | FileCheck %s --check-prefix=AUTO-FP8-64

// BAD: moe-decompose: block-m must be in [0, 2147483647], got -1
// BAD-TOKENS: moe-decompose: tokens must be in [1, 2147483647], got 4611686018427387904
// The routing of the first layer (T = 4, S = 2, E = 8) in blocks of 2^28
// rows would overflow the kernels' i32 rows.
// BAD-ROWS: error: 'moe.fused_moe' op moe-decompose: block-m = 268435456: T*S + E*(block_m-1) = 4*2 + 8*(268435456-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)

// block-m=0: 128-row blocks once the 8 experts average 64 of the 2 x T
// slots (T = 256), 64 below (T = 255).
// AUTO128-LABEL: func @mixtral_like
// AUTO128: moe.route {{.*}} {block_m = 128 : i64, num_experts = 8 : i64}
// AUTO64-LABEL: func @mixtral_like
// AUTO64: moe.route {{.*}} {block_m = 64 : i64, num_experts = 8 : i64}

// CHECK-LABEL: func @mixtral_like
// CHECK-SAME: (%[[X:.*]]: tensor<4x64xbf16>, %[[L:.*]]: tensor<4x8xf32>, %[[W13:.*]]: tensor<8x32x64xbf16>, %[[W2:.*]]: tensor<8x64x16xbf16>)
// CHECK-NEXT: %[[WTS:.*]], %[[IDS:.*]] = moe.gate %[[L]] {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}
// CHECK-SAME: (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
// 4*2 + 8*63 = 512 rows in 8 blocks of 64.
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route %[[IDS]] {block_m = 64 : i64, num_experts = 8 : i64}
// CHECK-SAME: (tensor<4x2xi32>) -> (tensor<512xi32>, tensor<8xi32>, tensor<i32>)
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[X]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] input(token) output(sorted) activation(silu_and_mul) {block_m = 64 : i64, num_slots = 2 : i64}
// CHECK-SAME: -> tensor<512x16xbf16>
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[H]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] routed_weights(%[[WTS]]) input(sorted) output(slot) {block_m = 64 : i64, num_slots = 2 : i64}
// CHECK-SAME: -> tensor<4x2x64xbf16>
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[O]] : (tensor<4x2x64xbf16>) -> tensor<4x64xbf16>
// CHECK-NEXT: return %[[Y]]
// BM16-LABEL: func @mixtral_like
// BM16: moe.route {{.*}} {block_m = 16 : i64, num_experts = 8 : i64} : (tensor<4x2xi32>) -> (tensor<128xi32>, tensor<8xi32>, tensor<i32>)
// BM16: moe.grouped_matmul {{.*}} {block_m = 16 : i64, num_slots = 2 : i64} {{.*}} -> tensor<128x16xbf16>
func.func @mixtral_like(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>,
                        %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>)
    -> tensor<4x64xbf16> {
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}
       : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>,
          tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return %y : tensor<4x64xbf16>
}

// -----

// Dynamic token count, correction bias, grouped routing and a fused shared
// expert (id 16, so 17 stored experts and 3 slots per token).
// CHECK-LABEL: func @deepseek_like
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xf16>, %[[L:.*]]: tensor<?x16xf32>, %[[W13:.*]]: tensor<17x32x64xf16>, %[[W2:.*]]: tensor<17x64x16xf16>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT: %[[WTS:.*]], %[[IDS:.*]] = moe.gate %[[L]] bias %[[B]] {router = #moe.router<scoring = sigmoid, top_k = 2, num_groups = 4, topk_groups = 2, routed_scaling_factor = 2.500000e+00, num_shared_experts = 1>}
// CHECK-SAME: (tensor<?x16xf32>, tensor<16xf32>) -> (tensor<?x3xf32>, tensor<?x3xi32>)
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route %[[IDS]] {block_m = 64 : i64, num_experts = 17 : i64}
// CHECK-SAME: (tensor<?x3xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[X]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] input(token) output(sorted) activation(gelu_and_mul) {block_m = 64 : i64, num_slots = 3 : i64}
// CHECK-SAME: -> tensor<?x16xf16>
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[H]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] routed_weights(%[[WTS]]) input(sorted) output(slot)
// CHECK-SAME: -> tensor<?x3x64xf16>
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[O]] : (tensor<?x3x64xf16>) -> tensor<?x64xf16>
// CHECK-NEXT: return %[[Y]]
// CHECK-NOT: moe.fused_moe
func.func @deepseek_like(%x: tensor<?x64xf16>, %l: tensor<?x16xf32>,
                         %w13: tensor<17x32x64xf16>, %w2: tensor<17x64x16xf16>,
                         %b: tensor<16xf32>) -> tensor<?x64xf16> {
  %y = moe.fused_moe %x, %l, %w13, %w2 bias(%b) activation(gelu_and_mul)
         {router = #moe.router<scoring = sigmoid, top_k = 2, num_groups = 4,
                               topk_groups = 2, routed_scaling_factor = 2.5,
                               num_shared_experts = 1>}
       : (tensor<?x64xf16>, tensor<?x16xf32>, tensor<17x32x64xf16>,
          tensor<17x64x16xf16>, tensor<16xf32>) -> tensor<?x64xf16>
  return %y : tensor<?x64xf16>
}

// -----

// moe.fused_experts: the given ids feed the route and the combine, which
// skips slots whose ids are outside [0, 6); the given weights go to the
// second GEMM's epilogue. No gate.
// CHECK-LABEL: func @experts_given_routing
// CHECK-SAME: (%[[X:.*]]: tensor<?x32xf16>, %[[IDS:.*]]: tensor<?x3xi32>, %[[WTS:.*]]: tensor<?x3xf32>, %[[W13:.*]]: tensor<6x32x32xf16>, %[[W2:.*]]: tensor<6x32x16xf16>)
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route %[[IDS]] {block_m = 64 : i64, num_experts = 6 : i64}
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[X]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] input(token) output(sorted) activation(gelu_and_mul) {block_m = 64 : i64, num_slots = 3 : i64}
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[H]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] routed_weights(%[[WTS]]) input(sorted) output(slot) {block_m = 64 : i64, num_slots = 3 : i64}
// CHECK-SAME: -> tensor<?x3x32xf16>
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[O]] ids(%[[IDS]]) {num_experts = 6 : i64} : (tensor<?x3x32xf16>, tensor<?x3xi32>) -> tensor<?x32xf16>
// CHECK-NEXT: return %[[Y]]
// BM16-LABEL: func @experts_given_routing
// BM16: moe.route {{.*}} {block_m = 16 : i64, num_experts = 6 : i64}
func.func @experts_given_routing(%x: tensor<?x32xf16>, %ids: tensor<?x3xi32>,
                                 %w: tensor<?x3xf32>, %w13: tensor<6x32x32xf16>,
                                 %w2: tensor<6x32x16xf16>) -> tensor<?x32xf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(gelu_and_mul)
       : (tensor<?x32xf16>, tensor<?x3xi32>, tensor<?x3xf32>,
          tensor<6x32x32xf16>, tensor<6x32x16xf16>) -> tensor<?x32xf16>
  return %y : tensor<?x32xf16>
}

// -----

// gpt-oss: the first GEMM takes w13's bias and the clamped SwiGLU with its
// parameters, the second w2's bias; the router's correction bias (none here)
// stays the gate's.
// CHECK-LABEL: func @gpt_oss_like
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xbf16>, %[[L:.*]]: tensor<?x8xf32>, %[[W13:.*]]: tensor<8x32x64xbf16>, %[[W2:.*]]: tensor<8x64x16xbf16>, %[[B13:.*]]: tensor<8x32xbf16>, %[[B2:.*]]: tensor<8x64xf32>)
// CHECK-NEXT: %[[WTS:.*]], %[[IDS:.*]] = moe.gate %[[L]] {router
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route %[[IDS]]
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[X]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] bias(%[[B13]]) input(token) output(sorted) activation(clamped_swiglu)
// CHECK-SAME: swiglu = #moe.swiglu<alpha = 1.702000e+00, limit = 7.000000e+00>
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[H]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] routed_weights(%[[WTS]]) bias(%[[B2]]) input(sorted) output(slot) {block_m = 64 : i64, num_slots = 4 : i64}
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[O]]
// CHECK-NEXT: return %[[Y]]
func.func @gpt_oss_like(%x: tensor<?x64xbf16>, %logits: tensor<?x8xf32>,
                        %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>,
                        %b13: tensor<8x32xbf16>, %b2: tensor<8x64xf32>)
    -> tensor<?x64xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 biases(%b13, %b2)
         activation(clamped_swiglu)
         {router = #moe.router<scoring = softmax, top_k = 4, renormalize = true>,
          swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
       : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x32x64xbf16>,
          tensor<8x64x16xbf16>, tensor<8x32xbf16>, tensor<8x64xf32>)
         -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// FP8, block scales: the hidden states are quantized per 128 columns for the
// first GEMM, which takes their scales and w13's; the activation's bf16
// output is quantized over the padded rows only (rows(%count)), in one group
// since I = 96 is narrower than a block; the second GEMM takes those scales
// and w2's.
// With block scales, 128-row blocks unless they pad an average expert by a
// quarter more than 64-row ones: at T = 256 the 17 experts average 76 of
// the 5 x 256 slots (128 rows either way), at T = 512 151 (256 against
// 192).
// AUTO-FP8-LABEL: func @mixtral_like
// AUTO-FP8: moe.route {{.*}} {block_m = 128 : i64, num_experts = 8 : i64}
// AUTO-FP8-LABEL: func @fused_moe_fp8_block
// AUTO-FP8: moe.route {{.*}} {block_m = 128 : i64, num_experts = 17 : i64}
// AUTO-FP8-64-LABEL: func @fused_moe_fp8_block
// AUTO-FP8-64: moe.route {{.*}} {block_m = 64 : i64, num_experts = 17 : i64}
// CHECK-LABEL: func @fused_moe_fp8_block
// CHECK-SAME: (%[[X:.*]]: tensor<?x256xbf16>, %[[L:.*]]: tensor<?x16xf32>, %[[W13:.*]]: tensor<17x192x256xf8E4M3FN>, %[[W2:.*]]: tensor<17x256x96xf8E4M3FN>, %[[S13:.*]]: tensor<17x2x2xf32>, %[[S2:.*]]: tensor<17x2x1xf32>)
// CHECK-NEXT: %[[WTS:.*]], %[[IDS:.*]] = moe.gate %[[L]]
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route %[[IDS]]
// CHECK-NEXT: %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] {group_size = 128 : i64}
// CHECK-SAME: (tensor<?x256xbf16>) -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>)
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[XQ]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] scales(%[[XS]], %[[S13]]) input(token) output(sorted) activation(silu_and_mul)
// CHECK-SAME: quantization = #moe.quantization<weights = block, activations = token_group>
// CHECK-SAME: -> tensor<?x96xbf16>
// CHECK-NEXT: %[[HQ:.*]], %[[HS:.*]] = moe.quantize %[[H]] rows(%[[COUNT]]) {group_size = 96 : i64}
// CHECK-SAME: (tensor<?x96xbf16>, tensor<i32>) -> (tensor<?x96xf8E4M3FN>, tensor<?x1xf32>)
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[HQ]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] routed_weights(%[[WTS]]) scales(%[[HS]], %[[S2]]) input(sorted) output(slot)
// CHECK-SAME: quantization = #moe.quantization<weights = block, activations = token_group>
// CHECK-SAME: -> tensor<?x5x256xbf16>
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[O]] : (tensor<?x5x256xbf16>) -> tensor<?x256xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @fused_moe_fp8_block(%x: tensor<?x256xbf16>, %logits: tensor<?x16xf32>,
                               %w13: tensor<17x192x256xf8E4M3FN>,
                               %w2: tensor<17x256x96xf8E4M3FN>,
                               %s13: tensor<17x2x2xf32>,
                               %s2: tensor<17x2x1xf32>) -> tensor<?x256xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul) {
         router = #moe.router<scoring = sigmoid, top_k = 4, num_shared_experts = 1>,
         quantization = #moe.quantization<weights = block, activations = token_group>}
       : (tensor<?x256xbf16>, tensor<?x16xf32>, tensor<17x192x256xf8E4M3FN>,
          tensor<17x256x96xf8E4M3FN>, tensor<17x2x2xf32>,
          tensor<17x2x1xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// -----

// FP8, channel scales, experts given routing: one activation scale per row
// (group_size = K), the combine masking the caller's ids as without fp8.
// CHECK-LABEL: func @fused_experts_fp8_channel
// CHECK-SAME: (%[[X:.*]]: tensor<?x256xf16>, %[[IDS:.*]]: tensor<?x2xi32>, %[[WTS:.*]]: tensor<?x2xf32>, %[[W13:.*]]: tensor<8x64x256xf8E4M3FN>, %[[W2:.*]]: tensor<8x256x32xf8E4M3FN>, %[[S13:.*]]: tensor<8x64xf32>, %[[S2:.*]]: tensor<8x256xf32>)
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route %[[IDS]]
// CHECK-NEXT: %[[XQ:.*]], %[[XS:.*]] = moe.quantize %[[X]] {group_size = 256 : i64}
// CHECK-SAME: -> (tensor<?x256xf8E4M3FN>, tensor<?x1xf32>)
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[XQ]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] scales(%[[XS]], %[[S13]]) input(token) output(sorted)
// CHECK-SAME: quantization = #moe.quantization<weights = channel, activations = token>
// CHECK-NEXT: %[[HQ:.*]], %[[HS:.*]] = moe.quantize %[[H]] rows(%[[COUNT]]) {group_size = 32 : i64}
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[HQ]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[COUNT]] routed_weights(%[[WTS]]) scales(%[[HS]], %[[S2]]) input(sorted) output(slot)
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[O]] ids(%[[IDS]]) {num_experts = 8 : i64}
// CHECK-NEXT: return %[[Y]]
func.func @fused_experts_fp8_channel(%x: tensor<?x256xf16>, %ids: tensor<?x2xi32>,
                                     %w: tensor<?x2xf32>,
                                     %w13: tensor<8x64x256xf8E4M3FN>,
                                     %w2: tensor<8x256x32xf8E4M3FN>,
                                     %s13: tensor<8x64xf32>,
                                     %s2: tensor<8x256xf32>) -> tensor<?x256xf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul) {
         quantization = #moe.quantization<weights = channel, activations = token>}
       : (tensor<?x256xf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>,
          tensor<8x64xf32>, tensor<8x256xf32>) -> tensor<?x256xf16>
  return %y : tensor<?x256xf16>
}

// -----

// FP8, static activation scales: each quantize takes its GEMM input's given
// scale (%a13 the hidden states', %a2 the activation's output's) and still
// yields [rows, 1] scales, which the GEMMs read as per-token ones.
// CHECK-LABEL: func @fused_moe_fp8_static
// CHECK-SAME: %[[S13:[a-z0-9]+]]: tensor<8xf32>, %[[S2:[a-z0-9]+]]: tensor<8xf32>, %[[A13:[a-z0-9]+]]: tensor<1xf32>, %[[A2:[a-z0-9]+]]: tensor<1xf32>)
// CHECK-NEXT: moe.gate
// CHECK-NEXT: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[COUNT:.*]] = moe.route
// CHECK-NEXT: %[[XQ:.*]], %[[XS:.*]] = moe.quantize %{{.*}} scale(%[[A13]]) {group_size = 256 : i64}
// CHECK-SAME: (tensor<?x256xbf16>, tensor<1xf32>) -> (tensor<?x256xf8E4M3FN>, tensor<?x1xf32>)
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[XQ]], %{{.*}} scales(%[[XS]], %[[S13]]) input(token) output(sorted)
// CHECK-SAME: quantization = #moe.quantization<weights = tensor, activations = static_tensor>
// CHECK-NEXT: %[[HQ:.*]], %[[HS:.*]] = moe.quantize %[[H]] scale(%[[A2]]) rows(%[[COUNT]]) {group_size = 96 : i64}
// CHECK-SAME: (tensor<?x96xbf16>, tensor<1xf32>, tensor<i32>) -> (tensor<?x96xf8E4M3FN>, tensor<?x1xf32>)
// CHECK-NEXT: moe.grouped_matmul %[[HQ]], %{{.*}} routed_weights(%{{.*}}) scales(%[[HS]], %[[S2]]) input(sorted) output(slot)
// CHECK-SAME: quantization = #moe.quantization<weights = tensor, activations = static_tensor>
// CHECK-NEXT: moe.combine
func.func @fused_moe_fp8_static(%x: tensor<?x256xbf16>, %logits: tensor<?x8xf32>,
                                %w13: tensor<8x192x256xf8E4M3FN>,
                                %w2: tensor<8x256x96xf8E4M3FN>,
                                %s13: tensor<8xf32>, %s2: tensor<8xf32>,
                                %a13: tensor<1xf32>, %a2: tensor<1xf32>)
    -> tensor<?x256xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(silu_and_mul) {
         router = #moe.router<scoring = softmax, top_k = 2>,
         quantization = #moe.quantization<weights = tensor, activations = static_tensor>}
       : (tensor<?x256xbf16>, tensor<?x8xf32>, tensor<8x192x256xf8E4M3FN>,
          tensor<8x256x96xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>,
          tensor<1xf32>, tensor<1xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// -----

// The experts given routing: the same quantizes by the given scales.
// CHECK-LABEL: func @fused_experts_fp8_static
// CHECK-SAME: %[[A13:[a-z0-9]+]]: tensor<1xf32>, %[[A2:[a-z0-9]+]]: tensor<1xf32>)
// CHECK: moe.quantize %{{.*}} scale(%[[A13]]) {group_size = 256 : i64}
// CHECK: moe.quantize %{{.*}} scale(%[[A2]]) rows(%{{.*}}) {group_size = 32 : i64}
func.func @fused_experts_fp8_static(%x: tensor<?x256xf16>, %ids: tensor<?x2xi32>,
                                    %w: tensor<?x2xf32>,
                                    %w13: tensor<8x64x256xf8E4M3FN>,
                                    %w2: tensor<8x256x32xf8E4M3FN>,
                                    %s13: tensor<8x64xf32>, %s2: tensor<8x256xf32>,
                                    %a13: tensor<1xf32>, %a2: tensor<1xf32>)
    -> tensor<?x256xf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(silu_and_mul) {
         quantization = #moe.quantization<weights = channel, activations = static_tensor>}
       : (tensor<?x256xf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>,
          tensor<8x64xf32>, tensor<8x256xf32>, tensor<1xf32>, tensor<1xf32>)
       -> tensor<?x256xf16>
  return %y : tensor<?x256xf16>
}
