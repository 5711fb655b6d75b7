// convert-moe-to-gpu reports what it cannot compile instead of dropping it.
// RUN: moe-opt %s --convert-moe-to-gpu --split-input-file --verify-diagnostics

func.func @fused(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) -> tensor<?x64xbf16> {
  // expected-error @below {{'moe.fused_moe' op must be decomposed first (moe-decompose)}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

func.func @experts(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) -> tensor<?x64xbf16> {
  // expected-error @below {{'moe.fused_experts' op must be decomposed first (moe-decompose)}}
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(silu_and_mul) : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// A function of no moe op has nothing to launch: a bundle of it would be
// invalid (the moe dialect, which the plan's attributes need, is not even
// loaded).
// expected-error @below {{convert-moe-to-gpu: @identity has no moe op: its kernels would launch nothing}}
func.func @identity(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  return %x : tensor<?x16xf32>
}

// -----

func.func @gemm(%x: tensor<?x32xbf16>, %w: tensor<4x16x32xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x16xbf16> {
  // expected-error @below {{'moe.grouped_matmul' op has no GPU lowering for block_m 8 (a multiple of 16 up to 128)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 8, num_slots = 2}
    : (tensor<?x32xbf16>, tensor<4x16x32xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x16xbf16>
  return %o : tensor<?x16xbf16>
}

// -----

func.func @gemm_two_stages(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{'moe.grouped_matmul' op has no wgmma lowering for #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 2>: num_stages must be at least 3}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 2>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_warpgroups_across_experts(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{num_warpgroups = 2>: num_warpgroups = 2 needs routing blocks (block_m) of at least 128 rows, so that a block's rows are one expert's}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, num_warpgroups = 2>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_three_warpgroups(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{num_warpgroups = 3>: num_warpgroups must be 1 or 2}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 256, num_slots = 2, config = #moe.gemm_config<block_m = 256, block_n = 64, block_k = 64, num_stages = 3, num_warpgroups = 3>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_narrow_k_tile(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{has no wgmma lowering for #moe.gemm_config<block_m = 64, block_n = 128, block_k = 32, num_stages = 4>: block_k must span the 128-byte swizzle}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 32, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_sorted_without_tma(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{num_stages = 4>: tma_a must be set exactly for sorted input rows}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(sorted) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_gated_block_n(%x: tensor<?x64xbf16>, %w: tensor<4x96x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x48xbf16> {
  // expected-error @below {{block_n must be a multiple of 16 (32 when gated) up to 256}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 48, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x96x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x48xbf16>
  return %o : tensor<?x48xbf16>
}

// -----

func.func @gemm_untiled(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{'moe.grouped_matmul' op has no #moe.gemm_config for its tensor-core kernel (run moe-tile and moe-tma)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) {block_m = 64, num_slots = 2}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_without_maps(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{'moe.grouped_matmul' op has no weights_map for its config's TMA loads (run moe-tma)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_weights_without_tma(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{tma_b = false>: tma_b must be set (weights load only by TMA)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_b = false>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_map_of_other_tiles(%x: tensor<?x64xbf16>, %w: tensor<4x256x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x256xbf16> {
  %map = moe.tensor_map %w : tensor<4x256x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
  // expected-error @below {{'moe.grouped_matmul' op expects its weights_map to be '!moe.tensor_map<bf16, box = [1, 256, 64], swizzle = 128>' for #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4>, got '!moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>'}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n weights_map(%map) input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4>}
    : (tensor<?x64xbf16>, tensor<4x256x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>) -> tensor<?x256xbf16>
  return %o : tensor<?x256xbf16>
}

// -----

func.func @gemm_f32_config(%x: tensor<?x32xf32>, %w: tensor<4x64x32xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xf32> {
  // expected-error @below {{'moe.grouped_matmul' op has a config but no tensor-core kernel (bf16/f16/fp8, rows of 16-byte multiples, a power-of-two block_m in [16, 256])}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 32, num_stages = 4>}
    : (tensor<?x32xf32>, tensor<4x64x32xf32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

func.func @too_many_experts(%ids: tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>) {
  // expected-error @below {{'moe.route' op has no GPU lowering for more than 1024 experts}}
  %s, %e, %n = moe.route %ids {num_experts = 2048, block_m = 16} : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %s, %e, %n : tensor<?xi32>, tensor<?xi32>, tensor<i32>
}

// -----

func.func @ep_route_too_many_local_experts(%counts: tensor<1025x1xi32>) -> (tensor<1025xi32>, tensor<1025xi32>, tensor<i32>) {
  // expected-error @below {{'moe.ep_route' op has no GPU lowering for more than 1024 local experts}}
  %s, %e, %n = moe.ep_route %counts {block_m = 1} : (tensor<1025x1xi32>) -> (tensor<1025xi32>, tensor<1025xi32>, tensor<i32>)
  return %s, %e, %n : tensor<1025xi32>, tensor<1025xi32>, tensor<i32>
}

// -----

func.func @gate_too_many_experts(%l: tensor<?x2048xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  // expected-error @below {{'moe.gate' op has no GPU lowering for more than 1024 experts}}
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x2048xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

func.func @other(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{'arith.addf' op is not part of a moe layer (convert-moe-to-gpu)}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @below {{convert-moe-to-gpu: expected one layer function, got 2}}
module {
  func.func @a() { return }
  func.func @b() { return }
}

// -----

// A tensor map has no buffer: returning one crashed the plan.
// expected-error @below {{convert-moe-to-gpu: result #0 of the layer function is '!moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>', not a ranked tensor of whole-byte elements (a buffer the caller passes)}}
func.func @returns_map(%w: tensor<8x64x64xbf16>) -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128> {
  %m = moe.tensor_map %w : tensor<8x64x64xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
  return %m : !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
}

// -----

// expected-error @below {{convert-moe-to-gpu: argument #1 of the layer function is 'i32', not a ranked tensor of whole-byte elements (a buffer the caller passes)}}
func.func @scalar_argument(%l: tensor<?x8xf32>, %k: i32) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

// Verified at one token, too many rows at tokens-max (16384).
func.func @rows_at_tokens_max(%ids: tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>) {
  // expected-error @below {{'moe.route' op convert-moe-to-gpu: tokens-max = 16384: T*S + E*(block_m-1) = 16384*2 + 1024*(2097152-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)}}
  %s, %e, %n = moe.route %ids {num_experts = 1024, block_m = 2097152} : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %s, %e, %n : tensor<?xi32>, tensor<?xi32>, tensor<i32>
}

// -----

// A tensor of elements that are no whole bytes is no buffer of the plan
// (found by moe-ir-fuzzer: the plan's verifier asserted).
// expected-error @below {{convert-moe-to-gpu: argument #1 of the layer function is 'tensor<4xi22>', not a ranked tensor of whole-byte elements (a buffer the caller passes)}}
func.func @sub_byte_argument(%l: tensor<?x8xf32>, %x: tensor<4xi22>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

// MXFP4 weights are decoded by a producer warpgroup: a config without one
// has no kernel.
func.func @mxfp4_without_producer(%x: tensor<?x2880xbf16>, %w: tensor<32x5760x1440xi8>, %s: tensor<32x5760x90xf8E8M0FNU>, %sorted: tensor<?xi32>, %experts: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x2880xbf16> {
  %m = moe.tensor_map %w : tensor<32x5760x1440xi8> -> !moe.tensor_map<i8, box = [1, 64, 32], swizzle = 0>
  // expected-error @below {{has no wgmma lowering for #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4>: mxfp4 weights need warp_specialized (its producer decodes them)}}
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n weight_scales(%s) weights_map(%m) input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 4, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4>, quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>} : (tensor<?x2880xbf16>, tensor<32x5760x1440xi8>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<32x5760x90xf8E8M0FNU>, !moe.tensor_map<i8, box = [1, 64, 32], swizzle = 0>) -> tensor<?x2880xbf16>
  return %h : tensor<?x2880xbf16>
}

// -----

func.func @gemm_cluster_n(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{cluster_n must be 1 (clusters pair row blocks, cluster_m)}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4, cluster_n = 2, warp_specialized = true>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

func.func @gemm_cluster_4(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{cluster_m must be 1 or 2}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4, cluster_m = 4, warp_specialized = true>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}

// -----

// The peers' barriers need a producer warpgroup.
func.func @gemm_cluster_plain(%x: tensor<?x64xbf16>, %w: tensor<4x64x64xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{cluster_m = 2 needs warp_specialized, no persistent grid, split_k = 1 and unpacked weights}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4, cluster_m = 2>}
    : (tensor<?x64xbf16>, tensor<4x64x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}


// -----

// A rank's kernels read only its own slice of an exchange buffer.
func.func @other_rank(%counts: tensor<2x5x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}) -> tensor<40xi32> {
  // expected-error @below {{'tensor.extract_slice' op is not a rank's own slice [rank, 0, ...] of an exchange buffer argument (marked 'moe.exchange'), the one slice a rank's kernels read as a buffer (convert-moe-to-gpu)}}
  %theirs = tensor.extract_slice %counts[0, 0, 0] [1, 5, 2] [1, 1, 1] : tensor<2x5x2xi32> to tensor<5x2xi32>
  %sorted, %experts, %padded = moe.ep_route %theirs {block_m = 1} : (tensor<5x2xi32>) -> (tensor<40xi32>, tensor<40xi32>, tensor<i32>)
  return %sorted : tensor<40xi32>
}

// -----

// A slice of a buffer that is not an exchange buffer is no buffer of the plan.
func.func @not_exchanged(%counts: tensor<2x5x2xi32>) -> tensor<40xi32> {
  // expected-error @below {{'tensor.extract_slice' op is not a rank's own slice [rank, 0, ...] of an exchange buffer argument}}
  %mine = tensor.extract_slice %counts[1, 0, 0] [1, 5, 2] [1, 1, 1] : tensor<2x5x2xi32> to tensor<5x2xi32>
  %sorted, %experts, %padded = moe.ep_route %mine {block_m = 1} : (tensor<5x2xi32>) -> (tensor<40xi32>, tensor<40xi32>, tensor<i32>)
  return %sorted : tensor<40xi32>
}

// -----

// The combine stores into every rank's return buffer: it must be an
// exchange buffer, whose slices the caller binds.
func.func @combine_not_exchanged(%rows: tensor<40x64xbf16>, %slots: tensor<40xi32>, %counts: tensor<5x2xi32>, %returned: tensor<2x4x3x64xbf16>) -> tensor<2x4x3x64xbf16> {
  // expected-error @below {{'moe.ep_combine' op reaches every rank's slice of a buffer that is not an exchange buffer argument (marked 'moe.exchange'), so no caller binds its ranks' slices (convert-moe-to-gpu)}}
  %back = moe.ep_combine %rows, %slots, %counts into(%returned)
    : (tensor<40x64xbf16>, tensor<40xi32>, tensor<5x2xi32>, tensor<2x4x3x64xbf16>) -> tensor<2x4x3x64xbf16>
  return %back : tensor<2x4x3x64xbf16>
}

// -----

// The flags of a signal and of a wait are reached through their peer
// table: they must be exchange buffers.
func.func @signal_not_exchanged(%flags: tensor<2x2xi32>) -> tensor<2x2xi32> {
  // expected-error @below {{'moe.ep_signal' op reaches every rank's slice of a buffer that is not an exchange buffer argument (marked 'moe.exchange'), so no caller binds its ranks' slices (convert-moe-to-gpu)}}
  %signalled = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>}
    : (tensor<2x2xi32>) -> tensor<2x2xi32>
  return %signalled : tensor<2x2xi32>
}

// -----

func.func @wait_not_exchanged(%flags: tensor<2x2xi32>, %status: tensor<2xi32>) -> tensor<2xi32> {
  // expected-error @below {{'moe.ep_wait' op reaches every rank's slice of a buffer that is not an exchange buffer argument}}
  %waited = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 2, rank = 0>, phase = 1}
    : (tensor<2x2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return %waited : tensor<2xi32>
}

// -----

// One thread per rank, in one block.
func.func @signal_too_many_ranks(%flags: tensor<1025x1025xi32> {moe.exchange = #moe.expert_parallel<world = 1025, rank = 0>}) -> tensor<1025x1025xi32> {
  // expected-error @below {{'moe.ep_signal' op has no GPU lowering for more than 1024 ranks (one thread each)}}
  %signalled = moe.ep_signal into(%flags) {expert_parallel = #moe.expert_parallel<world = 1025, rank = 0>}
    : (tensor<1025x1025xi32>) -> tensor<1025x1025xi32>
  return %signalled : tensor<1025x1025xi32>
}

// -----

func.func @wait_too_many_ranks(%flags: tensor<1025x1025xi32> {moe.exchange = #moe.expert_parallel<world = 1025, rank = 0>}, %status: tensor<2xi32>) -> tensor<2xi32> {
  // expected-error @below {{'moe.ep_wait' op has no GPU lowering for more than 1024 ranks (one thread each)}}
  %waited = moe.ep_wait %flags into(%status) {expert_parallel = #moe.expert_parallel<world = 1025, rank = 0>, phase = 2}
    : (tensor<1025x1025xi32>, tensor<2xi32>) -> tensor<2xi32>
  return %waited : tensor<2xi32>
}
