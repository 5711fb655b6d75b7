// Every verifier rule of the moe dialect rejects malformed IR with its own
// diagnostic.
// RUN: moe-opt %s --split-input-file --verify-diagnostics

//===----------------------------------------------------------------------===//
// #moe.router
//===----------------------------------------------------------------------===//

func.func @router_top_k(%l: tensor<4x8xf32>) {
  // expected-error @below {{top_k must be at least 1, got 0}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 0>}
    : (tensor<4x8xf32>) -> (tensor<4x0xf32>, tensor<4x0xi32>)
  return
}

// -----

func.func @router_num_groups(%l: tensor<4x8xf32>) {
  // expected-error @below {{num_groups must be at least 1, got 0}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, num_groups = 0>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @router_topk_groups(%l: tensor<4x8xf32>) {
  // expected-error @below {{topk_groups must be in [1, num_groups = 2], got 3}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, num_groups = 2, topk_groups = 3>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @router_scale(%l: tensor<4x8xf32>) {
  // expected-error @below {{routed_scaling_factor must be finite and positive, got -1}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, routed_scaling_factor = -1.0>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @router_shared(%l: tensor<4x8xf32>) {
  // expected-error @below {{num_shared_experts must be non-negative, got -1}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = -1>}
    : (tensor<4x8xf32>) -> (tensor<4x1xf32>, tensor<4x1xi32>)
  return
}

// -----

func.func @router_groups_divide(%l: tensor<4x8xf32>) {
  // expected-error @below {{'moe.gate' op num_groups (3) must divide the expert count (8)}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, num_groups = 3, topk_groups = 1>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @router_group_size(%l: tensor<4x8xf32>) {
  // expected-error @below {{'moe.gate' op grouped routing needs at least 2 experts per group, got 1}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = sigmoid, top_k = 2, num_groups = 8, topk_groups = 4>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @router_top_k_eligible(%l: tensor<4x256xf32>) {
  // expected-error @below {{'moe.gate' op top_k (40) exceeds the 32 experts of the topk_groups (1) chosen groups}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = sigmoid, top_k = 40, num_groups = 8, topk_groups = 1>}
    : (tensor<4x256xf32>) -> (tensor<4x40xf32>, tensor<4x40xi32>)
  return
}

// -----

func.func @router_top_k_experts(%l: tensor<4x8xf32>) {
  // expected-error @below {{'moe.gate' op top_k (9) exceeds the 8 experts of the topk_groups (1) chosen groups}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 9>}
    : (tensor<4x8xf32>) -> (tensor<4x9xf32>, tensor<4x9xi32>)
  return
}

// -----

// The GPU gate ranks groups unrolled: 1024 experts in 512 groups made
// millions of ops.
func.func @router_many_groups(%l: tensor<4x1024xf32>) {
  // expected-error @below {{num_groups must be at most 64 (the GPU gate ranks the groups unrolled), got 512}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 8, num_groups = 512, topk_groups = 512>}
    : (tensor<4x1024xf32>) -> (tensor<4x8xf32>, tensor<4x8xi32>)
  return
}

// -----

func.func @router_many_slots(%l: tensor<4x2048xf32>) {
  // expected-error @below {{top_k + num_shared_experts (the slots per token) must be at most 1024 (the GPU gate fills them unrolled), got 1000 + 25}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 1000, num_shared_experts = 25>}
    : (tensor<4x2048xf32>) -> (tensor<4x1025xf32>, tensor<4x1025xi32>)
  return
}

// -----

// Sizes near 2^63 must not overflow the check of their sum.
func.func @router_huge_shared(%l: tensor<4x8xf32>) {
  // expected-error @below {{top_k + num_shared_experts (the slots per token) must be at most 1024 (the GPU gate fills them unrolled), got 2 + 9223372036854775807}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 9223372036854775807>}
    : (tensor<4x8xf32>) -> (tensor<4x1xf32>, tensor<4x1xi32>)
  return
}

// -----

func.func @router_shared_ids(%l: tensor<1x2147483647xf32>) {
  // expected-error @below {{'moe.gate' op the expert count (2147483647) + num_shared_experts (1) must be at most 2147483647}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 1, num_shared_experts = 1>}
    : (tensor<1x2147483647xf32>) -> (tensor<1x2xf32>, tensor<1x2xi32>)
  return
}

//===----------------------------------------------------------------------===//
// #moe.gemm_config
//===----------------------------------------------------------------------===//

// -----

// expected-error @below {{block_m must be a power of two in [16, 256], got 48}}
func.func private @config_block_m() attributes {c = #moe.gemm_config<block_m = 48, block_n = 64, block_k = 64, num_stages = 2>}

// -----

// expected-error @below {{block_n must be a multiple of 16 in [16, 256], got 24}}
func.func private @config_block_n() attributes {c = #moe.gemm_config<block_m = 64, block_n = 24, block_k = 64, num_stages = 2>}

// -----

// expected-error @below {{block_k must be a power of two in [16, 256], got 8}}
func.func private @config_block_k() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 8, num_stages = 2>}

// -----

// expected-error @below {{num_stages must be in [1, 8], got 0}}
func.func private @config_stages() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 0>}

// -----

// expected-error @below {{num_warpgroups must be in [1, 4], got 5}}
func.func private @config_warpgroups() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 2, num_warpgroups = 5>}

// -----

// expected-error @below {{split_k must be at least 1, got 0}}
func.func private @config_split_k() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 2, split_k = 0>}

// -----

// expected-error @below {{split_k must be at most 64 (the reduction sums the splits unrolled), got 65}}
func.func private @config_split_k_max() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 2, split_k = 65>}

// -----

// expected-error @below {{cluster 4x4 must have power-of-two sides and at most 8 blocks (the portable cluster size)}}
func.func private @config_cluster() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 2, cluster_m = 4, cluster_n = 4>}

// -----

// expected-error @below {{stream_k needs a persistent grid and split_k = 1 (it splits the K steps of the last tiles itself)}}
func.func private @config_stream_k() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 2, stream_k = true>}

// -----

// expected-error @below {{stream_k needs a persistent grid and split_k = 1 (it splits the K steps of the last tiles itself)}}
func.func private @config_stream_k_split() attributes {c = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 2, split_k = 2, persistent = true, stream_k = true>}

//===----------------------------------------------------------------------===//
// moe.gate
//===----------------------------------------------------------------------===//

// -----

func.func @gate_logits_rank(%l: tensor<8xf32>) {
  // expected-error @below {{'moe.gate' op expects 'logits' of rank 2 [T, E], got 'tensor<8xf32>'}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<8xf32>) -> (tensor<2xf32>, tensor<2xi32>)
  return
}

// -----

func.func @gate_dynamic_experts(%l: tensor<4x?xf32>) {
  // expected-error @below {{'moe.gate' op expects 'logits' expert count E to be static, got 'tensor<4x?xf32>'}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x?xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @gate_logits_dtype(%l: tensor<4x8xi32>) {
  // expected-error @below {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x8xi32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @gate_bias_shape(%l: tensor<4x8xf32>, %b: tensor<7xf32>) {
  // expected-error @below {{'moe.gate' op expects 'correction_bias' of shape [E] = [8], got 'tensor<7xf32>'}}
  %w, %i = moe.gate %l bias %b {router = #moe.router<scoring = sigmoid, top_k = 2>}
    : (tensor<4x8xf32>, tensor<7xf32>) -> (tensor<4x2xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @gate_weights_slots(%l: tensor<4x8xf32>) {
  // expected-error @below {{'moe.gate' op expects 'weights' of shape [T, top_k + num_shared_experts] = [4, 3], got 'tensor<4x2xf32>'}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x3xi32>)
  return
}

// -----

func.func @gate_ids_tokens(%l: tensor<4x8xf32>) {
  // expected-error @below {{'moe.gate' op expects 'ids' of shape [T, top_k + num_shared_experts] = [4, 2], got 'tensor<5x2xi32>'}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<5x2xi32>)
  return
}

// -----

func.func @gate_weights_dtype(%l: tensor<4x8xf32>) {
  // expected-error @below {{result #0 must be ranked tensor of 32-bit float values}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x8xf32>) -> (tensor<4x2xbf16>, tensor<4x2xi32>)
  return
}

// -----

func.func @gate_ids_dtype(%l: tensor<4x8xf32>) {
  // expected-error @below {{result #1 must be ranked tensor of 32-bit signless integer values}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
  return
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

// -----

func.func @route_ids_rank(%ids: tensor<4x2x1xi32>) {
  // expected-error @below {{'moe.route' op expects 'ids' of rank 2 [T, S], got 'tensor<4x2x1xi32>'}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 16}
    : (tensor<4x2x1xi32>) -> (tensor<128xi32>, tensor<8xi32>, tensor<i32>)
  return
}

// -----

func.func @route_dynamic_slots(%ids: tensor<4x?xi32>) {
  // expected-error @below {{'moe.route' op expects 'ids' slot count S to be static, got 'tensor<4x?xi32>'}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 16}
    : (tensor<4x?xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return
}

// -----

func.func @route_block_m(%ids: tensor<4x2xi32>) {
  // expected-error @below {{attribute 'block_m' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 0}
    : (tensor<4x2xi32>) -> (tensor<8xi32>, tensor<8xi32>, tensor<i32>)
  return
}

// -----

func.func @route_num_experts(%ids: tensor<4x2xi32>) {
  // expected-error @below {{attribute 'num_experts' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %s, %e, %n = moe.route %ids {num_experts = 0, block_m = 16}
    : (tensor<4x2xi32>) -> (tensor<8xi32>, tensor<1xi32>, tensor<i32>)
  return
}

// -----

func.func @route_huge_block_m(%ids: tensor<?x2xi32>) {
  // expected-error @below {{attribute 'block_m' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive whose value is at most 2^31 - 1}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 4611686018427387904}
    : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return
}

// -----

// The capacity would overflow int64 and then match the dynamic results.
func.func @route_capacity_overflow(%ids: tensor<4x2xi32>) {
  // expected-error @below {{'moe.route' op at T = 4: T*S + E*(block_m-1) = 4*2 + 2147483647*(2147483647-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)}}
  %s, %e, %n = moe.route %ids {num_experts = 2147483647, block_m = 2147483647}
    : (tensor<4x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return
}

// -----

func.func @route_capacity_one_token(%ids: tensor<?x2xi32>) {
  // expected-error @below {{'moe.route' op even at one token: T*S + E*(block_m-1) = 1*2 + 1024*(2097153-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)}}
  %s, %e, %n = moe.route %ids {num_experts = 1024, block_m = 2097153}
    : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return
}

// -----

func.func @route_capacity(%ids: tensor<4x2xi32>) {
  // expected-error @below {{'moe.route' op expects 'sorted_ids' of shape [T*S + E*(block_m-1)] = [128], got 'tensor<8xi32>'}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 16}
    : (tensor<4x2xi32>) -> (tensor<8xi32>, tensor<8xi32>, tensor<i32>)
  return
}

// -----

func.func @route_blocks(%ids: tensor<4x2xi32>) {
  // expected-error @below {{'moe.route' op expects 'expert_ids' of shape [ceil(C / block_m)] = [8], got 'tensor<9xi32>'}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 16}
    : (tensor<4x2xi32>) -> (tensor<128xi32>, tensor<9xi32>, tensor<i32>)
  return
}

// -----

func.func @route_count_rank(%ids: tensor<4x2xi32>) {
  // expected-error @below {{result #2 must be 0D tensor of 32-bit signless integer values}}
  %s, %e, %n = moe.route %ids {num_experts = 8, block_m = 16}
    : (tensor<4x2xi32>) -> (tensor<128xi32>, tensor<8xi32>, tensor<1xi32>)
  return
}

//===----------------------------------------------------------------------===//
// moe.grouped_matmul
//===----------------------------------------------------------------------===//

// -----

func.func @gmm_input_order(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects input_order token or sorted, got slot}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(slot) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_output_order(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects output_order sorted or slot, got token}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(token) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @gmm_weights_rank(%x: tensor<4x32xbf16>, %w: tensor<64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'weights' of rank 3 [E, N, K], got 'tensor<64x32xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_weights_static(%x: tensor<4x32xbf16>, %w: tensor<8x?x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'weights' dimensions to be static, got 'tensor<8x?x32xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x?x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_input_rank(%x: tensor<4x2x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input' of rank 2 [rows, K], got 'tensor<4x2x32xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x2x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_dtype(%x: tensor<4x32xf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input' to have the element type of weights ('bf16'), got 'f16'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_reduction(%x: tensor<4x48xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input' of shape [T, K] = [4, 32], got 'tensor<4x48xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x48xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_odd_halves(%x: tensor<4x32xbf16>, %w: tensor<8x63x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op activation silu_and_mul multiplies the two halves of N, which needs an even N, got 63}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x63x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x31xbf16>
  return
}

// -----

func.func @gmm_halved_output(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'output' of shape [C, N'] = [128, 32], got 'tensor<128x64xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) activation(gelu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_bias(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %b: tensor<8x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'bias' of shape [E, N] = [8, 64], got 'tensor<8x32xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n bias(%b) input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>, tensor<8x32xbf16>) -> tensor<128x32xbf16>
  return
}

// -----

func.func @gmm_swiglu_without_clamped(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects a 'swiglu' attribute (alpha and limit) only with activation clamped_swiglu}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2, swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x32xbf16>
  return
}

// -----

func.func @gmm_token_count(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>, %rw: tensor<5x2xf32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects one token count T across the input, routed_weights and output, got [4, 5]}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n routed_weights(%rw) input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>, tensor<5x2xf32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_capacity(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<120xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'sorted_ids' of shape [T*S + E*(block_m-1)] = [128], got 'tensor<120xi32>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<120xi32>, tensor<8xi32>, tensor<i32>) -> tensor<120x64xbf16>
  return
}

// -----

func.func @gmm_capacity_overflow(%x: tensor<2x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op at T = 2: T*S + E*(block_m-1) = 2*1073741824 + 8*(16-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 1073741824}
    : (tensor<2x32xbf16>, tensor<8x64x32xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @gmm_blocks(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<4xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'expert_ids' of shape [ceil(C / block_m)] = [8], got 'tensor<4xi32>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<4xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_sorted_rows(%x: tensor<100x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input' of shape [C, K] = [128, 32], got 'tensor<100x32xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(sorted) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<100x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_routed_weights_slots(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>, %rw: tensor<4x3xf32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'routed_weights' of shape [T, S] = [4, 2], got 'tensor<4x3xf32>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n routed_weights(%rw) input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>, tensor<4x3xf32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_routed_weights_dtype(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>, %rw: tensor<4x2xbf16>) {
  // expected-error @below {{operand #5 must be ranked tensor of 32-bit float values}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n routed_weights(%rw) input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>, tensor<4x2xbf16>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_slot_output_rank(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'output' of rank 3 [T, S, N], got 'tensor<8x64xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(slot) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<8x64xbf16>
  return
}

// -----

func.func @gmm_slot_output_shape(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'output' of shape [T, S, N'] = [4, 2, 64], got 'tensor<4x3x64xbf16>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(slot) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<4x3x64xbf16>
  return
}

// -----

func.func @gmm_output_dtype(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{result #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xi8>
  return
}

// -----

func.func @gmm_config_block_m(%x: tensor<4x32xbf16>, %w: tensor<8x64x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects the config's block_m (64) to equal the routing block_m (16)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
    {block_m = 16, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 32, num_stages = 2>}
    : (tensor<4x32xbf16>, tensor<8x64x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xbf16>
  return
}

// -----

func.func @gmm_config_smem(%x: tensor<4x32xf32>, %w: tensor<8x64x32xf32>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op config needs 262144 bytes of shared memory for its tile ring, more than the 232448 a block can have}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
    {block_m = 16, num_slots = 2, config = #moe.gemm_config<block_m = 16, block_n = 240, block_k = 128, num_stages = 2>}
    : (tensor<4x32xf32>, tensor<8x64x32xf32>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

// -----

func.func @combine_rank(%r: tensor<8x64xbf16>) {
  // expected-error @below {{'moe.combine' op expects 'rows' of rank 3 [T, S, H], got 'tensor<8x64xbf16>'}}
  %y = moe.combine %r : (tensor<8x64xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @combine_static(%r: tensor<4x?x64xbf16>) {
  // expected-error @below {{'moe.combine' op expects 'rows' S and H to be static, got 'tensor<4x?x64xbf16>'}}
  %y = moe.combine %r : (tensor<4x?x64xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @combine_weights(%r: tensor<4x2x64xbf16>, %w: tensor<4x3xf32>) {
  // expected-error @below {{'moe.combine' op expects 'weights' of shape [T, S] = [4, 2], got 'tensor<4x3xf32>'}}
  %y = moe.combine %r weights(%w) : (tensor<4x2x64xbf16>, tensor<4x3xf32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @combine_output_shape(%r: tensor<4x2x64xbf16>) {
  // expected-error @below {{'moe.combine' op expects 'output' of shape [T, H] = [4, 64], got 'tensor<4x32xbf16>'}}
  %y = moe.combine %r : (tensor<4x2x64xbf16>) -> tensor<4x32xbf16>
  return
}

// -----

func.func @combine_output_dtype(%r: tensor<4x2x64xbf16>) {
  // expected-error @below {{'moe.combine' op expects 'output' to have the element type of rows ('bf16'), got 'f32'}}
  %y = moe.combine %r : (tensor<4x2x64xbf16>) -> tensor<4x64xf32>
  return
}

// -----

func.func @combine_ids_shape(%r: tensor<4x2x64xbf16>, %ids: tensor<4x3xi32>) {
  // expected-error @below {{'moe.combine' op expects 'ids' of shape [T, S] = [4, 2], got 'tensor<4x3xi32>'}}
  %y = moe.combine %r ids(%ids) {num_experts = 8} : (tensor<4x2x64xbf16>, tensor<4x3xi32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @combine_ids_without_bound(%r: tensor<4x2x64xbf16>, %ids: tensor<4x2xi32>) {
  // expected-error @below {{'moe.combine' op expects 'ids' and 'num_experts' together: the ids select the slots in [0, num_experts)}}
  %y = moe.combine %r ids(%ids) : (tensor<4x2x64xbf16>, tensor<4x2xi32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @combine_bound_without_ids(%r: tensor<4x2x64xbf16>) {
  // expected-error @below {{'moe.combine' op expects 'ids' and 'num_experts' together: the ids select the slots in [0, num_experts)}}
  %y = moe.combine %r {num_experts = 8} : (tensor<4x2x64xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @combine_zero_experts(%r: tensor<4x2x64xbf16>, %ids: tensor<4x2xi32>) {
  // expected-error @below {{'moe.combine' op attribute 'num_experts' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %y = moe.combine %r ids(%ids) {num_experts = 0} : (tensor<4x2x64xbf16>, tensor<4x2xi32>) -> tensor<4x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// moe.fused_experts
//===----------------------------------------------------------------------===//

// -----

func.func @experts_ids_rank(%x: tensor<4x64xbf16>, %ids: tensor<8xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'ids' of rank 2 [T, S], got 'tensor<8xi32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<8xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_ids_static_slots(%x: tensor<4x64xbf16>, %ids: tensor<4x?xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'ids' slot count S to be static, got 'tensor<4x?xi32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x?xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_ids_tokens(%x: tensor<4x64xbf16>, %ids: tensor<5x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'ids' of shape [T, S] = [4, 2], got 'tensor<5x2xi32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<5x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_weights_shape(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x3xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'weights' of shape [T, S] = [?, 2], got 'tensor<?x3xf32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x3xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @experts_swiglu_missing(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects a 'swiglu' attribute (alpha and limit) with activation clamped_swiglu}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(clamped_swiglu) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_w13_bias(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>, %b13: tensor<8x16xf32>, %b2: tensor<8x64xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13_bias' of shape [E, 2I] = [8, 32], got 'tensor<8x16xf32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 biases(%b13, %b2) activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<8x16xf32>, tensor<8x64xf32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_w2_bias(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>, %b13: tensor<8x32xf32>, %b2: tensor<8x16xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w2_bias' of shape [E, H] = [8, 64], got 'tensor<8x16xf32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 biases(%b13, %b2) activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<8x32xf32>, tensor<8x16xf32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_one_bias(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>, %b13: tensor<8x32xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13_bias' and 'w2_bias' together}}
  %y = "moe.fused_experts"(%x, %ids, %w, %w13, %w2, %b13) <{activation = 1 : i32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0>}> : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<8x32xf32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_activation(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects a gated activation (silu_and_mul, gelu_and_mul or clamped_swiglu) for the expert MLP}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(none) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_w2_experts(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<7x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w2' of shape [E, H, I] = [8, 64, 16], got 'tensor<7x64x16xbf16>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<7x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_w13_hidden(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x48xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13' of shape [E, 2I, H] = [8, 32, 64], got 'tensor<8x32x48xbf16>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x48xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_w13_dynamic(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<?x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13' dimensions to be static, got 'tensor<?x32x64xbf16>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<?x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_dtype(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13' to have the element type of hidden_states ('bf16'), got 'f16'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @experts_output(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects 'output' of shape [T, H] = [4, 64], got 'tensor<3x64xbf16>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<3x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// moe.fused_moe
//===----------------------------------------------------------------------===//

// -----

func.func @fused_activation(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects a gated activation (silu_and_mul, gelu_and_mul or clamped_swiglu) for the expert MLP}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(none) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_moe_w2_bias(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>, %b13: tensor<8x32xbf16>, %b2: tensor<7x64xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w2_bias' of shape [E+X, H] = [8, 64], got 'tensor<7x64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 biases(%b13, %b2) activation(clamped_swiglu) {router = #moe.router<scoring = softmax, top_k = 2>, swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<8x32xbf16>, tensor<7x64xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_hidden_rank(%x: tensor<64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'hidden_states' of rank 2 [T, H], got 'tensor<64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_tokens(%x: tensor<4x64xbf16>, %l: tensor<5x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'router_logits' of shape [T, E] = [4, 8], got 'tensor<5x8xf32>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<5x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_router(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op num_groups (3) must divide the expert count (8)}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_groups = 3>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_w13_halves(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x33x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w13' to hold gate and up rows (an even 2I), got 'tensor<8x33x64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x33x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_w13_static(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<?x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w13' dimensions to be static, got 'tensor<?x32x64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<?x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

// The weights of fused shared experts follow the routed experts'.
func.func @fused_shared_experts(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w13' of shape [E+X, 2I, H] = [9, 32, 64], got 'tensor<8x32x64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_w2_shape(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x32xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w2' of shape [E+X, H, I] = [8, 64, 16], got 'tensor<8x64x32xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_w2_dtype(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w2' to have the element type of hidden_states ('bf16'), got 'f16'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @fused_output(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'output' to have the element type of hidden_states ('bf16'), got 'f32'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xf32>
  return
}

// -----

func.func @fused_bias(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>, %b: tensor<16xf32>) {
  // expected-error @below {{'moe.fused_moe' op expects 'correction_bias' of shape [E] = [8], got 'tensor<16xf32>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 bias(%b) activation(silu_and_mul) {router = #moe.router<scoring = sigmoid, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>, tensor<16xf32>) -> tensor<4x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// !moe.tensor_map and moe.tensor_map
//===----------------------------------------------------------------------===//

// -----

// expected-error @below {{expects box edges of 1 to 256 elements, got 512}}
func.func private @map_box_edge(!moe.tensor_map<bf16, box = [1, 512, 64], swizzle = 128>)

// -----

// expected-error @below {{expects a swizzle of 0, 32, 64 or 128 bytes, got 16}}
func.func private @map_swizzle(!moe.tensor_map<bf16, box = [64, 8], swizzle = 16>)

// -----

// expected-error @below {{expects the innermost box edge to be a multiple of 16 bytes, got 24}}
func.func private @map_inner_bytes(!moe.tensor_map<bf16, box = [64, 12], swizzle = 0>)

// -----

// expected-error @below {{expects the innermost box edge (256 bytes) to fit in the 128-byte swizzle span}}
func.func private @map_inner_swizzle(!moe.tensor_map<bf16, box = [64, 128], swizzle = 128>)

// -----

func.func @map_rank(%w: tensor<4x64x64xbf16>) {
  // expected-error @below {{'moe.tensor_map' op expects a box of the source's rank (3), got 2 dims}}
  %m = moe.tensor_map %w : tensor<4x64x64xbf16> -> !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>
  return
}

// -----

func.func @map_element(%w: tensor<4x64x64xbf16>) {
  // expected-error @below {{'moe.tensor_map' op expects the map's element type 'f16' to be the source's ('bf16')}}
  %m = moe.tensor_map %w : tensor<4x64x64xbf16> -> !moe.tensor_map<f16, box = [1, 64, 64], swizzle = 128>
  return
}

// -----

func.func @map_rows(%w: tensor<4x64x12xbf16>) {
  // expected-error @below {{'moe.tensor_map' op expects static source rows of a multiple of 16 bytes (TMA strides), got 'tensor<4x64x12xbf16>'}}
  %m = moe.tensor_map %w : tensor<4x64x12xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 8], swizzle = 0>
  return
}

// -----

func.func @gemm_map_without_config(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  %m = moe.tensor_map %w : tensor<4x64x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
  // expected-error @below {{'moe.grouped_matmul' op expects a config for its weights_map}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n weights_map(%m) input(token) output(sorted) {block_m = 64, num_slots = 2}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @gemm_map_of_other(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %v: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  %m = moe.tensor_map %v : tensor<4x64x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
  // expected-error @below {{'moe.grouped_matmul' op expects weights_map to be the moe.tensor_map of the weights}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n weights_map(%m) input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @gemm_map_without_tma(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  %m = moe.tensor_map %w : tensor<4x64x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
  // expected-error @below {{'moe.grouped_matmul' op has a weights_map but its config does not load the weights by TMA (tma_b)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n weights_map(%m) input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4, tma_b = false>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @gemm_map_block_k(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  %m = moe.tensor_map %w : tensor<4x64x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 32], swizzle = 64>
  // expected-error @below {{'moe.grouped_matmul' op expects the weights_map box to span block_k (64) elements of K, got 32}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n weights_map(%m) input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [1, 64, 32], swizzle = 64>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @gemm_map_experts(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  %m = moe.tensor_map %w : tensor<4x64x64xbf16> -> !moe.tensor_map<bf16, box = [2, 64, 64], swizzle = 128>
  // expected-error @below {{'moe.grouped_matmul' op expects weights_map boxes of one expert}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n weights_map(%m) input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [2, 64, 64], swizzle = 128>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @gemm_input_map_gathered(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  %m = moe.tensor_map %x : tensor<?x64xbf16> -> !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>
  // expected-error @below {{'moe.grouped_matmul' op expects no input_map for gathered token rows (they load by cp.async)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input_map(%m) input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4, tma_a = true>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>) -> tensor<?x64xbf16>
  return
}

// -----
// #moe.swiglu

// expected-error @below {{limit must be finite and positive, got -7}}
func.func @swiglu_limit() attributes {s = #moe.swiglu<alpha = 1.702, limit = -7.0>} {
  return
}

// -----

// expected-error @below {{alpha must be finite, got INF}}
func.func @swiglu_alpha() attributes {s = #moe.swiglu<alpha = 0x7FF0000000000000, limit = 7.0>} {
  return
}

// -----
// FP8: #moe.quantization, scales of fp8 weights and moe.quantize.

// expected-error @below {{block_size must be in [1, 1024], got 0}}
func.func @quantization_block_size() attributes {q = #moe.quantization<weights = block, activations = token_group, block_size = 0>} {
  return
}

// -----

// expected-error @below {{weights = block pairs with activations = token_group, got token}}
func.func @quantization_pairing() attributes {q = #moe.quantization<weights = block, activations = token>} {
  return
}

// -----

// expected-error @below {{weights = block pairs with activations = token_group, got static_tensor}}
func.func @quantization_static_block() attributes {q = #moe.quantization<weights = block, activations = static_tensor>} {
  return
}

// -----

// expected-error @below {{weights = channel pairs with activations = token or static_tensor, got token_group}}
func.func @quantization_channel_groups() attributes {q = #moe.quantization<weights = channel, activations = token_group>} {
  return
}

// -----

func.func @fp8_weights_without_quantization(%x: tensor<4x256xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x64x256xf8E4M3FN>, %w2: tensor<8x256x32xf8E4M3FN>) {
  // expected-error @below {{'moe.fused_experts' op expects a quantization for its 'f8E4M3FN' 'w13'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<4x256xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>) -> tensor<4x256xbf16>
  return
}

// -----

func.func @quantization_without_fp8(%x: tensor<4x256xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<8x64x256xbf16>, %w2: tensor<8x256x32xbf16>, %s13: tensor<8xf32>, %s2: tensor<8xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'f8E4M3FN' 'w13' with weights = tensor, got 'bf16'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = tensor, activations = token>} : (tensor<4x256xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8x64x256xbf16>, tensor<8x256x32xbf16>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x256xbf16>
  return
}

// -----

func.func @fp8_block_scales_ragged(%x: tensor<?x256xbf16>, %logits: tensor<?x8xf32>, %w13: tensor<8x192x256xf8E4M3FN>, %w2: tensor<8x256x96xf8E4M3FN>, %s13: tensor<8x1x2xf32>, %s2: tensor<8x2x1xf32>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w13_scales' of shape block scales of 'w13' = [8, 2, 2], got 'tensor<8x1x2xf32>'}}
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>, quantization = #moe.quantization<weights = block, activations = token_group>} : (tensor<?x256xbf16>, tensor<?x8xf32>, tensor<8x192x256xf8E4M3FN>, tensor<8x256x96xf8E4M3FN>, tensor<8x1x2xf32>, tensor<8x2x1xf32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @fp8_channel_scales(%x: tensor<?x256xbf16>, %logits: tensor<?x8xf32>, %w13: tensor<8x192x256xf8E4M3FN>, %w2: tensor<8x256x96xf8E4M3FN>, %s13: tensor<8x192xf32>, %s2: tensor<8x96xf32>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w2_scales' of shape channel scales of 'w2' = [8, 256], got 'tensor<8x96xf32>'}}
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>, quantization = #moe.quantization<weights = channel, activations = token>} : (tensor<?x256xbf16>, tensor<?x8xf32>, tensor<8x192x256xf8E4M3FN>, tensor<8x256x96xf8E4M3FN>, tensor<8x192xf32>, tensor<8x96xf32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @static_without_input_scales(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>, %w13: tensor<8x64x256xf8E4M3FN>, %w2: tensor<8x256x32xf8E4M3FN>, %s13: tensor<8xf32>, %s2: tensor<8xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'input_scales' (the w13 and w2 inputs' given scales) with activations = static_tensor}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = tensor, activations = static_tensor>} : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @input_scales_with_dynamic_activations(%x: tensor<?x256xbf16>, %logits: tensor<?x8xf32>, %w13: tensor<8x192x256xf8E4M3FN>, %w2: tensor<8x256x96xf8E4M3FN>, %s13: tensor<8x192xf32>, %s2: tensor<8x256xf32>, %a13: tensor<1xf32>, %a2: tensor<1xf32>) {
  // expected-error @below {{'moe.fused_moe' op expects 'input_scales' (the w13 and w2 inputs' given scales) only with activations = static_tensor}}
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2) input_scales(%a13, %a2) activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>, quantization = #moe.quantization<weights = channel, activations = token>} : (tensor<?x256xbf16>, tensor<?x8xf32>, tensor<8x192x256xf8E4M3FN>, tensor<8x256x96xf8E4M3FN>, tensor<8x192xf32>, tensor<8x256xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @input_scales_without_quantization(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>, %w13: tensor<8x64x256xbf16>, %w2: tensor<8x256x32xbf16>, %a13: tensor<1xf32>, %a2: tensor<1xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'input_scales' (the w13 and w2 inputs' given scales) only with activations = static_tensor}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 input_scales(%a13, %a2) activation(silu_and_mul) : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x64x256xbf16>, tensor<8x256x32xbf16>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @input_scale_per_expert(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>, %w13: tensor<8x64x256xf8E4M3FN>, %w2: tensor<8x256x32xf8E4M3FN>, %s13: tensor<8xf32>, %s2: tensor<8xf32>, %a13: tensor<1xf32>, %a2: tensor<8xf32>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w2_input_scale' to hold one scale (shape [1]), got 'tensor<8xf32>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) input_scales(%a13, %a2) activation(silu_and_mul) {quantization = #moe.quantization<weights = tensor, activations = static_tensor>} : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x64x256xf8E4M3FN>, tensor<8x256x32xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>, tensor<1xf32>, tensor<8xf32>) -> tensor<?x256xbf16>
  return
}

// -----

func.func @input_scale_dynamic(%x: tensor<?x256xbf16>, %logits: tensor<?x8xf32>, %w13: tensor<8x192x256xf8E4M3FN>, %w2: tensor<8x256x96xf8E4M3FN>, %s13: tensor<8xf32>, %s2: tensor<8xf32>, %a13: tensor<?xf32>, %a2: tensor<1xf32>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w13_input_scale' to hold one scale (shape [1]), got 'tensor<?xf32>'}}
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2) input_scales(%a13, %a2) activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>, quantization = #moe.quantization<weights = tensor, activations = static_tensor>} : (tensor<?x256xbf16>, tensor<?x8xf32>, tensor<8x192x256xf8E4M3FN>, tensor<8x256x96xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>, tensor<?xf32>, tensor<1xf32>) -> tensor<?x256xbf16>
  return
}

// -----

// A static scale reaches the GEMM broadcast per row by moe.quantize, not as
// the [1] operand of the layer.
func.func @fp8_gemm_static_input_scales(%x: tensor<?x256xf8E4M3FN>, %xs: tensor<1xf32>, %w: tensor<4x64x256xf8E4M3FN>, %ws: tensor<4xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input_scales' of shape [rows, ceil(K / group)] = [?, 1], got 'tensor<1xf32>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n scales(%xs, %ws) input(token) output(sorted)
      {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = tensor, activations = static_tensor>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x64x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<1xf32>, tensor<4xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @fp8_gemm_input_scales(%x: tensor<?x200xf8E4M3FN>, %xs: tensor<?x1xf32>, %w: tensor<4x64x200xf8E4M3FN>, %ws: tensor<4x1x2xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input_scales' of shape [rows, ceil(K / group)] = [?, 2], got 'tensor<?x1xf32>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n scales(%xs, %ws) input(token) output(sorted)
      {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>}
    : (tensor<?x200xf8E4M3FN>, tensor<4x64x200xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x1xf32>, tensor<4x1x2xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @fp8_gemm_input_type(%x: tensor<?x256xbf16>, %xs: tensor<?x2xf32>, %w: tensor<4x64x256xf8E4M3FN>, %ws: tensor<4x1x2xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input' to have the element type of weights ('f8E4M3FN'), got 'bf16'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n scales(%xs, %ws) input(token) output(sorted)
      {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>}
    : (tensor<?x256xbf16>, tensor<4x64x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x1x2xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @quantize_group_size(%x: tensor<?x64xbf16>) {
  // expected-error @below {{'moe.quantize' op expects a group_size of at most the row size K (64), got 128}}
  %q, %s = moe.quantize %x {group_size = 128} : (tensor<?x64xbf16>) -> (tensor<?x64xf8E4M3FN>, tensor<?x1xf32>)
  return
}

// -----

func.func @quantize_scales(%x: tensor<?x200xbf16>) {
  // expected-error @below {{'moe.quantize' op expects 'scales' of shape [M, ceil(K / group_size)] = [?, 2], got 'tensor<?x1xf32>'}}
  %q, %s = moe.quantize %x {group_size = 128} : (tensor<?x200xbf16>) -> (tensor<?x200xf8E4M3FN>, tensor<?x1xf32>)
  return
}

// -----

func.func @quantize_scale_per_row(%x: tensor<?x64xbf16>, %a: tensor<?x1xf32>) {
  // expected-error @below {{'moe.quantize' op expects 'scale' to hold one scale (shape [1]), got 'tensor<?x1xf32>'}}
  %q, %s = moe.quantize %x scale(%a) {group_size = 64} : (tensor<?x64xbf16>, tensor<?x1xf32>) -> (tensor<?x64xf8E4M3FN>, tensor<?x1xf32>)
  return
}

// -----

func.func @quantize_output(%x: tensor<4x64xbf16>) {
  // expected-error @below {{'moe.quantize' op result #0 must be ranked tensor of f8E4M3FN type values, but got 'tensor<4x64xbf16>'}}
  %q, %s = moe.quantize %x {group_size = 64} : (tensor<4x64xbf16>) -> (tensor<4x64xbf16>, tensor<4x1xf32>)
  return
}

//===----------------------------------------------------------------------===//
// Sizes (MoeLimits.h): static sizes in [1, 2^31 - 1], tensors under 2^63
// bytes, slot ids in i32
//===----------------------------------------------------------------------===//

// -----

// H = 0 used to verify and then pass moe-run's check vacuously.
func.func @zero_hidden(%x: tensor<?x0xbf16>, %l: tensor<?x8xf32>, %w13: tensor<8x64x0xbf16>, %w2: tensor<8x0x32xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects static sizes in [1, 2147483647], got 'tensor<?x0xbf16>' for operand #0}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x0xbf16>, tensor<?x8xf32>, tensor<8x64x0xbf16>, tensor<8x0x32xbf16>) -> tensor<?x0xbf16>
  return
}

// -----

func.func @zero_intermediate(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %w13: tensor<8x0x64xbf16>, %w2: tensor<8x64x0xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects static sizes in [1, 2147483647], got 'tensor<8x0x64xbf16>' for operand #2}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x0x64xbf16>, tensor<8x64x0xbf16>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @zero_experts(%ids: tensor<?x2xi32>, %w: tensor<?x2xf32>, %x: tensor<?x64xbf16>, %w13: tensor<0x32x64xbf16>, %w2: tensor<0x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op expects static sizes in [1, 2147483647], got 'tensor<0x32x64xbf16>' for operand #3}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<0x32x64xbf16>, tensor<0x64x16xbf16>) -> tensor<?x64xbf16>
  return
}

// -----

// A layer of no tokens is a dynamic T of 0 at run time, not a static one.
func.func @zero_tokens(%l: tensor<0x8xf32>) {
  // expected-error @below {{'moe.gate' op expects static sizes in [1, 2147483647], got 'tensor<0x8xf32>' for operand #0}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<0x8xf32>) -> (tensor<0x2xf32>, tensor<0x2xi32>)
  return
}

// -----

// moe-split-k divided by N / block_n = 0.
func.func @zero_columns(%x: tensor<4x32xbf16>, %w: tensor<8x0x32xbf16>, %s: tensor<128xi32>, %e: tensor<8xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects static sizes in [1, 2147483647], got 'tensor<8x0x32xbf16>' for operand #1}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<8x0x32xbf16>, tensor<128xi32>, tensor<8xi32>, tensor<i32>) -> tensor<128x0xbf16>
  return
}

// -----

func.func @zero_slot_rows(%r: tensor<4x2x0xbf16>) {
  // expected-error @below {{'moe.combine' op expects static sizes in [1, 2147483647], got 'tensor<4x2x0xbf16>' for operand #0}}
  %y = moe.combine %r : (tensor<4x2x0xbf16>) -> tensor<4x0xbf16>
  return
}

// -----

func.func @size_above_i32(%l: tensor<4x8xf32>) {
  // expected-error @below {{'moe.gate' op expects static sizes in [1, 2147483647], got 'tensor<4x2147483648xf32>' for result #0}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x8xf32>) -> (tensor<4x2147483648xf32>, tensor<4x2xi32>)
  return
}

// -----

func.func @bytes_above_int64(%x: tensor<4x32xbf16>, %w: tensor<2147483647x2147483647x32xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects tensors of fewer than 2^63 bytes (a dynamic size counted as 2147483647), got 'tensor<2147483647x2147483647x32xbf16>' for operand #1}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<4x32xbf16>, tensor<2147483647x2147483647x32xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x2147483647xbf16>
  return
}

// -----

// A dynamic T counts as 2^31 - 1 tokens: [T, H] rows of 2^31 - 1 f32 values
// would be 2^64 bytes.
func.func @dynamic_bytes_above_int64(%r: tensor<?x1x2147483647xf32>) {
  // expected-error @below {{'moe.combine' op expects tensors of fewer than 2^63 bytes (a dynamic size counted as 2147483647), got 'tensor<?x1x2147483647xf32>' for operand #0}}
  %y = moe.combine %r : (tensor<?x1x2147483647xf32>) -> tensor<?x2147483647xf32>
  return
}

// -----

// Slot ids t * S + s are i32.
func.func @fused_slots_above_i32(%x: tensor<1073741824x64xbf16>, %l: tensor<1073741824x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_moe' op at T = 1073741824: T*S = 1073741824*2 routed slots exceed 2147483647 (the kernels' slot ids and rows are i32)}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<1073741824x64xbf16>, tensor<1073741824x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<1073741824x64xbf16>
  return
}

// -----

func.func @experts_slots_above_i32(%x: tensor<2x64xbf16>, %ids: tensor<2x1073741824xi32>, %w: tensor<2x1073741824xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @below {{'moe.fused_experts' op at T = 2: T*S = 2*1073741824 routed slots exceed 2147483647 (the kernels' slot ids and rows are i32)}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<2x64xbf16>, tensor<2x1073741824xi32>, tensor<2x1073741824xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<2x64xbf16>
  return
}

// -----

// MXFP4 is weight-only.
// expected-error @below {{weights = mxfp4 pairs with activations = none, got token}}
func.func private @mxfp4_with_token_activations() attributes {q = #moe.quantization<weights = mxfp4, activations = token, block_size = 32>}

// -----

// expected-error @below {{weights = block pairs with activations = token, token_group or static_tensor, got none}}
func.func private @fp8_without_quantized_activations() attributes {q = #moe.quantization<weights = block, activations = none>}

// -----

// expected-error @below {{weights = mxfp4 scales blocks of 32 values (block_size = 32), got block_size = 128}}
func.func private @mxfp4_block_size() attributes {q = #moe.quantization<weights = mxfp4, activations = none>}

// -----

func.func @mxfp4_fp8_weights(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<4x128x32xf8E4M3FN>, %w2: tensor<4x64x32xi8>, %s13: tensor<4x128x2xf8E8M0FNU>, %s2: tensor<4x64x2xf8E8M0FNU>) {
  // expected-error @below {{'moe.fused_experts' op expects 'i8' 'w13' with weights = mxfp4, got 'f8E4M3FN'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x128x32xf8E4M3FN>, tensor<4x64x32xi8>, tensor<4x128x2xf8E8M0FNU>, tensor<4x64x2xf8E8M0FNU>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @mxfp4_f32_scales(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<4x128x32xi8>, %w2: tensor<4x64x32xi8>, %s13: tensor<4x128x2xf32>, %s2: tensor<4x64x2xf8E8M0FNU>) {
  // expected-error @below {{'moe.fused_experts' op expects 'f8E8M0FNU' 'w13_scales' with weights = mxfp4, got 'f32'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x128x32xi8>, tensor<4x64x32xi8>, tensor<4x128x2xf32>, tensor<4x64x2xf8E8M0FNU>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @mxfp4_unpacked_weights(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<4x128x64xi8>, %w2: tensor<4x64x32xi8>, %s13: tensor<4x128x2xf8E8M0FNU>, %s2: tensor<4x64x2xf8E8M0FNU>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13' of shape [E, 2I, H/2] = [4, 128, 32], got 'tensor<4x128x64xi8>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x128x64xi8>, tensor<4x64x32xi8>, tensor<4x128x2xf8E8M0FNU>, tensor<4x64x2xf8E8M0FNU>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @mxfp4_partial_block(%x: tensor<4x48xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<4x128x24xi8>, %w2: tensor<4x48x32xi8>, %s13: tensor<4x128x2xf8E8M0FNU>, %s2: tensor<4x48x2xf8E8M0FNU>) {
  // expected-error @below {{'moe.fused_experts' op expects the K of 'w13' (48) to be a multiple of the mxfp4 block (32)}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<4x48xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x128x24xi8>, tensor<4x48x32xi8>, tensor<4x128x2xf8E8M0FNU>, tensor<4x48x2xf8E8M0FNU>) -> tensor<4x48xbf16>
  return
}

// -----

func.func @mxfp4_scales_shape(%x: tensor<4x64xbf16>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>, %w13: tensor<4x128x32xi8>, %w2: tensor<4x64x32xi8>, %s13: tensor<4x128x1xf8E8M0FNU>, %s2: tensor<4x64x2xf8E8M0FNU>) {
  // expected-error @below {{'moe.fused_experts' op expects 'w13_scales' of shape mxfp4 scales of 'w13' = [4, 128, 2], got 'tensor<4x128x1xf8E8M0FNU>'}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2) activation(silu_and_mul) {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<4x64xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x128x32xi8>, tensor<4x64x32xi8>, tensor<4x128x1xf8E8M0FNU>, tensor<4x64x2xf8E8M0FNU>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @mxfp4_input_scales(%x: tensor<?x64xbf16>, %xs: tensor<?x1xf32>, %w: tensor<4x128x32xi8>, %ws: tensor<4x128x2xf8E8M0FNU>, %sorted: tensor<?xi32>, %experts: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input_scales' only with quantized (fp8) input rows}}
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n scales(%xs, %ws) input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<?x64xbf16>, tensor<4x128x32xi8>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x1xf32>, tensor<4x128x2xf8E8M0FNU>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @fp8_without_input_scales(%x: tensor<?x64xf8E4M3FN>, %w: tensor<4x128x64xf8E4M3FN>, %ws: tensor<4xf32>, %sorted: tensor<?xi32>, %experts: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects 'input_scales' with quantized (fp8) input rows}}
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n weight_scales(%ws) input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = tensor, activations = token>} : (tensor<?x64xf8E4M3FN>, tensor<4x128x64xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<4xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @mxfp4_fp8_input(%x: tensor<?x64xf8E4M3FN>, %w: tensor<4x128x32xi8>, %ws: tensor<4x128x2xf8E8M0FNU>, %sorted: tensor<?xi32>, %experts: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects float 'input' rows (f32, bf16 or f16) with weight-only quantization, got 'f8E4M3FN'}}
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n weight_scales(%ws) input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<?x64xf8E4M3FN>, tensor<4x128x32xi8>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<4x128x2xf8E8M0FNU>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @i8_weights_without_quantization(%x: tensor<?x64xbf16>, %w: tensor<4x128x32xi8>, %sorted: tensor<?xi32>, %experts: tensor<?xi32>, %n: tensor<i32>) {
  // expected-error @below {{'moe.grouped_matmul' op expects a quantization for its 'i8' 'weights'}}
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 2} : (tensor<?x64xbf16>, tensor<4x128x32xi8>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Expert parallel
//===----------------------------------------------------------------------===//

// -----

func.func @ep_rank_past_world(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>) {
  // expected-error @below {{rank must be in [0, world = 2), got 2}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>, expert_parallel = #moe.expert_parallel<world = 2, rank = 2>} : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<5x256x64xbf16>, tensor<5x64x128xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @ep_no_world(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>) {
  // expected-error @below {{world must be in [1, 2147483647], got 0}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>, expert_parallel = #moe.expert_parallel<world = 0, rank = 0>} : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<5x256x64xbf16>, tensor<5x64x128xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @ep_uneven_split(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<3x256x64xbf16>, %w2: tensor<3x64x128xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects the 8 routed experts to split evenly over world = 3 ranks}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>, expert_parallel = #moe.expert_parallel<world = 3, rank = 0>} : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<3x256x64xbf16>, tensor<3x64x128xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @ep_dynamic_tokens(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'hidden_states' token count T (each rank's bucket, which sizes the exchange's buffers) to be static, got 'tensor<?x64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>, expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<5x256x64xbf16>, tensor<5x64x128xbf16>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @ep_all_experts(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<9x256x64xbf16>, %w2: tensor<9x64x128xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects 'w13' of shape [E/W+X, 2I, H] = [5, 256, 64], got 'tensor<9x256x64xbf16>'}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>, expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<9x256x64xbf16>, tensor<9x64x128xbf16>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @ep_receive_rows_overflow(%x: tensor<1073741824x64xbf16>, %l: tensor<1073741824x8xf32>, %w13: tensor<4x256x64xbf16>, %w2: tensor<4x64x128xbf16>) {
  // expected-error @below {{'moe.fused_moe' op expects a receive buffer of (E/W+X)*W*T = 4*2*1073741824 rows, at most 2147483647}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 1>, expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<1073741824x64xbf16>, tensor<1073741824x8xf32>, tensor<4x256x64xbf16>, tensor<4x64x128xbf16>) -> tensor<1073741824x64xbf16>
  return
}

// -----

func.func @ep_dispatch_capacity(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>, %w: tensor<4x3xf32>, %rows: tensor<2x30x64xbf16>, %weights: tensor<2x30xf32>, %slots: tensor<2x30xi32>, %counts: tensor<2x5x2xi32>) {
  // expected-error @below {{'moe.ep_dispatch' op expects a capacity C of at least T = 4 rows per (local expert, source rank), so that no region overflows, got 3}}
  %r:4 = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, num_experts = 8} : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x30x64xbf16>, tensor<2x30xf32>, tensor<2x30xi32>, tensor<2x5x2xi32>) -> (tensor<2x30x64xbf16>, tensor<2x30xf32>, tensor<2x30xi32>, tensor<2x5x2xi32>)
  return
}

// -----

func.func @ep_dispatch_ragged_regions(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>, %w: tensor<4x3xf32>, %rows: tensor<2x41x64xbf16>, %weights: tensor<2x41xf32>, %slots: tensor<2x41xi32>, %counts: tensor<2x5x2xi32>) {
  // expected-error @below {{'moe.ep_dispatch' op expects 'recv_rows' to hold L*W*C rows, a multiple of L*W = 5*2, got 41}}
  %r:4 = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, num_experts = 8} : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x41x64xbf16>, tensor<2x41xf32>, tensor<2x41xi32>, tensor<2x5x2xi32>) -> (tensor<2x41x64xbf16>, tensor<2x41xf32>, tensor<2x41xi32>, tensor<2x5x2xi32>)
  return
}

// -----

func.func @ep_dispatch_counts_of_other_world(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>, %w: tensor<4x3xf32>, %rows: tensor<2x40x64xbf16>, %weights: tensor<2x40xf32>, %slots: tensor<2x40xi32>, %counts: tensor<4x5x4xi32>) {
  // expected-error @below {{'moe.ep_dispatch' op expects 'recv_counts' of shape [W, L, W] = [2, 5, 2], got 'tensor<4x5x4xi32>'}}
  %r:4 = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, num_experts = 8} : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<4x5x4xi32>) -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<4x5x4xi32>)
  return
}

// -----

func.func @ep_dispatch_too_few_local_experts(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>, %w: tensor<4x3xf32>, %rows: tensor<2x24x64xbf16>, %weights: tensor<2x24xf32>, %slots: tensor<2x24xi32>, %counts: tensor<2x3x2xi32>) {
  // expected-error @below {{'moe.ep_dispatch' op expects L = E/W + X >= 4 local experts in 'recv_counts', got 3}}
  %r:4 = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, num_experts = 8} : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x24x64xbf16>, tensor<2x24xf32>, tensor<2x24xi32>, tensor<2x3x2xi32>) -> (tensor<2x24x64xbf16>, tensor<2x24xf32>, tensor<2x24xi32>, tensor<2x3x2xi32>)
  return
}

// -----

func.func @ep_dispatch_uneven_split(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>, %w: tensor<4x3xf32>, %rows: tensor<2x40x64xbf16>, %weights: tensor<2x40xf32>, %slots: tensor<2x40xi32>, %counts: tensor<2x5x2xi32>) {
  // expected-error @below {{'moe.ep_dispatch' op expects the 9 routed experts to split evenly over world = 2 ranks}}
  %r:4 = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, num_experts = 9} : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>) -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>)
  return
}

// -----

func.func @ep_dispatch_result_type(%x: tensor<4x64xbf16>, %ids: tensor<4x3xi32>, %w: tensor<4x3xf32>, %rows: tensor<2x40x64xbf16>, %weights: tensor<2x40xf32>, %slots: tensor<2x40xi32>, %counts: tensor<2x5x2xi32>) {
  // expected-error @below {{'moe.ep_dispatch' op expects result 'rows' of the type of the buffer it updates ('tensor<2x40x64xbf16>'), got 'tensor<2x40x64xf16>'}}
  %r:4 = moe.ep_dispatch %x, %ids, %w into(%rows, %weights, %slots, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, num_experts = 8} : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>, tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>) -> (tensor<2x40x64xf16>, tensor<2x40xf32>, tensor<2x40xi32>, tensor<2x5x2xi32>)
  return
}

// -----

func.func @ep_route_ragged_regions(%counts: tensor<5x2xi32>) {
  // expected-error @below {{'moe.ep_route' op expects 'sorted_ids' to hold L*W*C rows, a multiple of L*W = 5*2, got 42}}
  %s, %e, %n = moe.ep_route %counts {block_m = 1} : (tensor<5x2xi32>) -> (tensor<42xi32>, tensor<42xi32>, tensor<i32>)
  return
}

// -----

func.func @ep_route_ragged_padded_regions(%counts: tensor<5x2xi32>) {
  // expected-error @below {{'moe.ep_route' op expects 'sorted_ids' to hold L*W*C + L*(block_m-1) rows (C >= 1) for L*W = 5*2 and L*(block_m-1) = 5*3, got 42}}
  %s, %e, %n = moe.ep_route %counts {block_m = 4} : (tensor<5x2xi32>) -> (tensor<42xi32>, tensor<11xi32>, tensor<i32>)
  return
}

// -----

// The padding alone: no region of C >= 1 rows.
func.func @ep_route_no_rows(%counts: tensor<5x2xi32>) {
  // expected-error @below {{'moe.ep_route' op expects 'sorted_ids' to hold L*W*C + L*(block_m-1) rows (C >= 1) for L*W = 5*2 and L*(block_m-1) = 5*3, got 15}}
  %s, %e, %n = moe.ep_route %counts {block_m = 4} : (tensor<5x2xi32>) -> (tensor<15xi32>, tensor<4xi32>, tensor<i32>)
  return
}

// -----

func.func @ep_route_expert_ids(%counts: tensor<5x2xi32>) {
  // expected-error @below {{'moe.ep_route' op expects 'expert_ids' of shape [ceil((L*W*C + L*(block_m-1)) / block_m)] = [14], got 'tensor<55xi32>'}}
  %s, %e, %n = moe.ep_route %counts {block_m = 4} : (tensor<5x2xi32>) -> (tensor<55xi32>, tensor<55xi32>, tensor<i32>)
  return
}

// -----

func.func @ep_route_block_m_zero(%counts: tensor<5x2xi32>) {
  // expected-error @below {{'moe.ep_route' op attribute 'block_m' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive whose value is at most 2^31 - 1}}
  %s, %e, %n = moe.ep_route %counts {block_m = 0} : (tensor<5x2xi32>) -> (tensor<40xi32>, tensor<40xi32>, tensor<i32>)
  return
}

// -----

func.func @ep_route_no_block_m(%counts: tensor<5x2xi32>) {
  // expected-error @below {{'moe.ep_route' op requires attribute 'block_m'}}
  %s, %e, %n = moe.ep_route %counts : (tensor<5x2xi32>) -> (tensor<40xi32>, tensor<40xi32>, tensor<i32>)
  return
}

// -----

func.func @ep_combine_capacity(%rows: tensor<40x64xbf16>, %slots: tensor<40xi32>, %counts: tensor<5x2xi32>, %returned: tensor<2x3x3x64xbf16>) {
  // expected-error @below {{'moe.ep_combine' op expects 'returned' of shape [W, C, S, H] = [2, 4, 3, 64], got 'tensor<2x3x3x64xbf16>'}}
  %r = moe.ep_combine %rows, %slots, %counts into(%returned) : (tensor<40x64xbf16>, tensor<40xi32>, tensor<5x2xi32>, tensor<2x3x3x64xbf16>) -> tensor<2x3x3x64xbf16>
  return
}

// -----

func.func @ep_signal_flags_of_other_world(%flags: tensor<4x4xi32>) {
  // expected-error @below {{'moe.ep_signal' op expects 'flags' of shape [W, W] = [2, 2], got 'tensor<4x4xi32>'}}
  %f = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<4x4xi32>) -> tensor<4x4xi32>
  return
}

// -----

func.func @ep_signal_flags_rank(%flags: tensor<4xi32>) {
  // expected-error @below {{'moe.ep_signal' op expects 'flags' of rank 2 [W, W], got 'tensor<4xi32>'}}
  %f = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<4xi32>) -> tensor<4xi32>
  return
}

// -----

func.func @ep_signal_dynamic_flags(%flags: tensor<?x2xi32>) {
  // expected-error @below {{'moe.ep_signal' op expects 'flags' dimensions to be static, got 'tensor<?x2xi32>'}}
  %f = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<?x2xi32>) -> tensor<?x2xi32>
  return
}

// -----

func.func @ep_signal_f32_flags(%flags: tensor<2x2xf32>) {
  // expected-error @below {{'moe.ep_signal' op operand #0 must be ranked tensor of 32-bit signless integer values, but got 'tensor<2x2xf32>'}}
  %f = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @ep_signal_result_type(%flags: tensor<2x2xi32>) {
  // expected-error @below {{'moe.ep_signal' op expects result 'output' of the type of the buffer it updates ('tensor<2x2xi32>'), got 'tensor<4xi32>'}}
  %f = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>} : (tensor<2x2xi32>) -> tensor<4xi32>
  return
}

// -----

func.func @ep_wait_flags_of_other_world(%flags: tensor<2x2xi32>, %status: tensor<2xi32>) {
  // expected-error @below {{'moe.ep_wait' op expects 'flags' of shape [W, W] = [4, 4], got 'tensor<2x2xi32>'}}
  %s = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 4, rank = 0>, phase = 1} : (tensor<2x2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return
}

// -----

func.func @ep_wait_status_shape(%flags: tensor<2x2xi32>, %status: tensor<3xi32>) {
  // expected-error @below {{'moe.ep_wait' op expects 'status' of shape [2] = [2], got 'tensor<3xi32>'}}
  %s = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 1} : (tensor<2x2xi32>, tensor<3xi32>) -> tensor<3xi32>
  return
}

// -----

func.func @ep_wait_status_rank(%flags: tensor<2x2xi32>, %status: tensor<1x2xi32>) {
  // expected-error @below {{'moe.ep_wait' op expects 'status' of rank 1 [2], got 'tensor<1x2xi32>'}}
  %s = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 1} : (tensor<2x2xi32>, tensor<1x2xi32>) -> tensor<1x2xi32>
  return
}

// -----

func.func @ep_wait_status_result(%flags: tensor<2x2xi32>, %status: tensor<2xi32>) {
  // expected-error @below {{'moe.ep_wait' op expects result 'updated_status' of the type of the buffer it updates ('tensor<2xi32>'), got 'tensor<?xi32>'}}
  %s = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 1} : (tensor<2x2xi32>, tensor<2xi32>) -> tensor<?xi32>
  return
}

// -----

func.func @ep_wait_phase(%flags: tensor<2x2xi32>, %status: tensor<2xi32>) {
  // expected-error @below {{'moe.ep_wait' op expects 'phase' 1 (the experts phase waits for the dispatch) or 2 (the combine phase waits for the experts phase), got 3}}
  %s = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 3} : (tensor<2x2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return
}

// -----

func.func @ep_wait_guarded_count(%flags: tensor<2x2xi32>, %status: tensor<2xi32>, %rows: tensor<2x40x64xbf16>) {
  // expected-error @below {{'moe.ep_wait' op expects one result per guarded buffer (1), got 0}}
  %s = moe.ep_wait %flags into(%status) guards(%rows) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 1} : (tensor<2x2xi32>, tensor<2xi32>, tensor<2x40x64xbf16>) -> tensor<2xi32>
  return
}

// -----

func.func @ep_wait_guarded_type(%flags: tensor<2x2xi32>, %status: tensor<2xi32>, %rows: tensor<2x40x64xbf16>, %counts: tensor<2x5x2xi32>) {
  // expected-error @below {{'moe.ep_wait' op expects result 'ready #1' of the type of the buffer it updates ('tensor<2x5x2xi32>'), got 'tensor<2x5x2xf32>'}}
  %s, %r:2 = moe.ep_wait %flags into(%status) guards(%rows, %counts) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 2} : (tensor<2x2xi32>, tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xi32>) -> (tensor<2xi32>, tensor<2x40x64xbf16>, tensor<2x5x2xf32>)
  return
}

// -----

// An exchange buffer holds one slice per rank: its first dimension is the
// world.
// expected-error @below {{'func.func' op argument 0 is an exchange buffer of 4 ranks ('moe.exchange') but its type 'tensor<2x40xf32>' is not a ranked tensor or memref [4, ...] of one slice per rank}}
func.func private @exchange_world(tensor<2x40xf32> {moe.exchange = #moe.expert_parallel<world = 4, rank = 0>})

// -----

// expected-error @below {{'func.func' op expects 'moe.exchange' of argument 0 to be a #moe.expert_parallel, got 2 : i64}}
func.func private @exchange_kind(tensor<2x40xf32> {moe.exchange = 2})

// -----

// expected-error @below {{'func.func' op argument 0 has 'moe.slices', which is not an argument attribute of the moe dialect}}
func.func private @exchange_unknown(tensor<2x40xf32> {moe.slices = 2})

// -----

func.func @exchange_on_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'arith.addf' op has 'moe.exchange', which only a function argument may carry}}
  %y = arith.addf %x, %x {moe.exchange = #moe.expert_parallel<world = 2, rank = 0>} : tensor<4xf32>
  return %y : tensor<4xf32>
}
