// moe-tile gives each grouped matmul without a config the heuristic
// #moe.gemm_config: the routing block_m, 256 accumulator columns from 256
// tokens on (128 below), K tiles of 128 bytes (64 bf16/f16), TMA on A
// exactly for sorted rows, a producer warpgroup for a bf16/f16 GEMM that
// gathers token rows from 256 tokens on, two warpgroups on 128-row routing
// blocks, four stages but three while the tokens give each expert about a
// row (decode) and three for bf16/f16 two warpgroups fed by a producer
// without a persistent grid; at
// decode, 64 columns, a producer and six stages for a gated GEMM whose
// 128-column tiles would leave some of the num-sms multiprocessors without
// a block; a persistent grid for a gathering bf16/f16 GEMM with a producer
// from 1024 tokens when it has at most 128 experts; stream-K on a
// persistent grid for one without a producer of at least 128 K tiles whose
// tiles fill one to six rounds (fp8:
// K tiles of 128, at most 128 columns with block scales, a producer for two
// warpgroups with block scales only);
// block-n and num-stages override the
// heuristic; a config already present (by hand or from the tuner) is kept;
// an op the tensor-core kernel cannot run (f32) is left to the SIMT kernel,
// untiled.
// RUN: moe-opt %s --moe-tile | FileCheck %s
// RUN: moe-opt %s --moe-tile="tokens=16" | FileCheck %s --check-prefix=DECODE
// RUN: moe-opt %s --moe-tile="tokens=2" | FileCheck %s --check-prefix=STREAM
// RUN: moe-opt %s --moe-tile="tokens=2 num-sms=2" | FileCheck %s --check-prefix=FEW-SMS
// RUN: moe-opt %s --moe-tile="tokens=512" | FileCheck %s --check-prefix=MID
// RUN: moe-opt %s --moe-tile="block-n=64 num-stages=6" | FileCheck %s --check-prefix=OVERRIDE
// RUN: moe-opt %s --moe-tile="tokens=1024 device='NVIDIA H20'" 2>&1 | FileCheck %s --check-prefix=LONG-K
// RUN: moe-opt %s --moe-tile="tokens=4096 device='NVIDIA H20'" 2>&1 | FileCheck %s --check-prefix=MANY-ROUNDS
// RUN: moe-opt %s --moe-tile="tokens=256 device='NVIDIA H20'" 2>&1 | FileCheck %s --check-prefix=FEW-TILES
// RUN: not moe-opt %s --moe-tile="block-n=72" 2>&1 | FileCheck %s --check-prefix=BAD-N
// RUN: not moe-opt %s --moe-tile="tokens=0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not moe-opt %s --moe-tile="num-sms=0" 2>&1 | FileCheck %s --check-prefix=BAD-SMS
// RUN: not moe-opt %s --moe-tile="tokens=4611686018427387904" 2>&1 | FileCheck %s --check-prefix=BAD-BIG

// BAD: moe-tile: tokens must be in [1, 2147483647], got 0
// BAD-BIG: moe-tile: tokens must be in [1, 2147483647], got 4611686018427387904
// BAD-SMS: moe-tile: num-sms must be in [1, {{[0-9]+}}], got 0
// BAD-N: 'moe.grouped_matmul' op moe-tile: block_n must be a multiple of 16 in [16, 256], got 72

// DECODE: config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 64, num_stages = 4>
// DECODE: config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 3, tma_a = true>
// OVERRIDE: config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 6, persistent = true, warp_specialized = true>
// OVERRIDE: config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 3, tma_a = true>

// CHECK-LABEL: func.func @fp8_gemm
// CHECK: config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 128, num_stages = 4, tma_a = true>
// STREAM-LABEL: func.func @fp8_gemm
// STREAM: config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 128, num_stages = 3, tma_a = true>
func.func @fp8_gemm(%q: tensor<?x256xf8E4M3FN>, %w: tensor<4x128x256xf8E4M3FN>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                    %qs: tensor<?x2xf32>, %ws: tensor<4x1x2xf32>) -> tensor<?x128xbf16> {
  %f = moe.grouped_matmul %q, %w, %s, %e, %n scales(%qs, %ws) input(sorted) output(sorted)
    {block_m = 16, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x128x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x1x2xf32>) -> tensor<?x128xbf16>
  return %f : tensor<?x128xbf16>
}

// From 256 tokens the gathering GEMM has a producer warpgroup issue its
// cp.async row gathers, from 1024 on in a persistent grid over its 4
// experts; at 2 tokens over 4 experts the weights stream: its 4 tiles of
// 128 columns would fill 132 multiprocessors poorly, so it takes 64 columns
// streamed by a producer through six stages, and with 2 multiprocessors
// 128 columns and three stages, like the second GEMM.
// CHECK-LABEL: func.func @gemms
// CHECK: moe.grouped_matmul {{.*}} input(token) output(sorted) activation(silu_and_mul) {block_m = 16 : i64, config = #moe.gemm_config<block_m = 16, block_n = 256, block_k = 64, num_stages = 4, persistent = true, warp_specialized = true>, num_slots = 2 : i64}
// CHECK: moe.grouped_matmul {{.*}} input(sorted) output(slot) {block_m = 16 : i64, num_slots = 2 : i64} : (tensor<?x64xf32>
// CHECK: moe.grouped_matmul {{.*}} {block_m = 16 : i64, config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 3, tma_a = true>, num_slots = 2 : i64}
// STREAM-LABEL: func.func @gemms
// STREAM: input(token) {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 6, warp_specialized = true>,
// FEW-SMS-LABEL: func.func @gemms
// FEW-SMS: input(token) {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 64, num_stages = 3>,
// MID-LABEL: func.func @gemms
// MID: input(token) {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 256, block_k = 64, num_stages = 4, warp_specialized = true>,
func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x128x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x64xf32>, %w2: tensor<4x96x64xf32>, %rw: tensor<?x2xf32>,
                 %g: tensor<?x64xf16>, %w3: tensor<4x96x64xf16>)
    -> (tensor<?x64xbf16>, tensor<?x2x96xf32>, tensor<?x96xf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) {block_m = 16, num_slots = 2}
    : (tensor<?x64xf32>, tensor<4x96x64xf32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x96xf32>
  %kept = moe.grouped_matmul %g, %w3, %s, %e, %n input(sorted) output(sorted)
      {block_m = 16, num_slots = 2, config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 3, tma_a = true>}
    : (tensor<?x64xf16>, tensor<4x96x64xf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x96xf16>
  return %up, %down, %kept : tensor<?x64xbf16>, tensor<?x2x96xf32>, tensor<?x96xf16>
}

// 128-row routing blocks: two consumer warpgroups; fed by a producer (the
// gathering GEMM) their ring has three stages below 1024 tokens, and four
// from there on, where the grid over its 4 experts is persistent; four for
// the second GEMM.
// CHECK-LABEL: func.func @two_warpgroups
// CHECK: input(token) {{.*}}config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, persistent = true, warp_specialized = true>,
// MID-LABEL: func.func @two_warpgroups
// MID: input(token) {{.*}}config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 3, num_warpgroups = 2, warp_specialized = true>,
// CHECK: input(sorted) {{.*}}config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>,
func.func @two_warpgroups(%x: tensor<?x128xbf16>, %w13: tensor<4x128x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                          %w2: tensor<4x128x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x128xbf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 128, num_slots = 2}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  %down = moe.grouped_matmul %up, %w2, %s, %e, %n input(sorted) output(sorted) {block_m = 128, num_slots = 2}
    : (tensor<?x64xbf16>, tensor<4x128x64xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  return %up, %down : tensor<?x64xbf16>, tensor<?x128xbf16>
}

// Block-scaled fp8 at 128-row routing blocks: two consumer warpgroups fed
// by a producer, so that one promotes while the other multiplies, four
// stages of 128 x 128 bytes.
// CHECK-LABEL: func.func @fp8_block_two_warpgroups
// CHECK: config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 128, num_stages = 4, num_warpgroups = 2, warp_specialized = true>
func.func @fp8_block_two_warpgroups(%q: tensor<?x256xf8E4M3FN>, %w: tensor<4x256x256xf8E4M3FN>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                                    %rs: tensor<?x2xf32>, %ws: tensor<4x2x2xf32>) -> tensor<?x128xbf16> {
  %f = moe.grouped_matmul %q, %w, %s, %e, %n scales(%rs, %ws) input(token) output(sorted) activation(silu_and_mul)
    {block_m = 128, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x256x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x2x2xf32>) -> tensor<?x128xbf16>
  return %f : tensor<?x128xbf16>
}

// fp8 GEMMs that gather their rows keep the consumers' own gathers (the
// tuned block-scaled ones have no producer).
// CHECK-LABEL: func.func @fp8_gathering
// CHECK: config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 128, num_stages = 4>,
func.func @fp8_gathering(%q: tensor<?x256xf8E4M3FN>, %w: tensor<4x128x256xf8E4M3FN>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                         %rs: tensor<?x1xf32>, %cs: tensor<4x128xf32>) -> tensor<?x128xbf16> {
  %f = moe.grouped_matmul %q, %w, %s, %e, %n scales(%rs, %cs) input(token) output(sorted)
    {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = channel, activations = token>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x128x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x1xf32>, tensor<4x128xf32>) -> tensor<?x128xbf16>
  return %f : tensor<?x128xbf16>
}

// With more than 128 experts a gathering GEMM's grid is not persistent
// (DeepSeek-V3's 257 stored experts lost 1.7x).
// CHECK-LABEL: func.func @many_experts
// CHECK: config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4, warp_specialized = true>,
func.func @many_experts(%x: tensor<?x128xbf16>, %w13: tensor<257x128x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 9}
    : (tensor<?x128xbf16>, tensor<257x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %up : tensor<?x64xbf16>
}

// A bf16/f16 GEMM of at least 128 K tiles whose tiles fill one to six
// rounds of the num-sms multiprocessors splits its last round along K
// (stream-K, on a persistent grid): Mixtral-8x7B's second GEMM at 1024
// tokens (320 tiles of 224 K tiles). At 4096 tokens its tiles fill more
// than six rounds, and at 256 fewer than one: no stream-K. (A device
// without shipped entries, so that the heuristic decides: the H100's
// entries for this shape say the same.)
// LONG-K-LABEL: func.func @long_k
// LONG-K: config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true, persistent = true, stream_k = true>, num_slots
// MANY-ROUNDS-LABEL: func.func @long_k
// MANY-ROUNDS: config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>, num_slots
// FEW-TILES-LABEL: func.func @long_k
// FEW-TILES: config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>, num_slots
func.func @long_k(%h: tensor<?x14336xbf16>, %w2: tensor<8x4096x14336xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>) -> tensor<?x2x4096xbf16> {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) {block_m = 128, num_slots = 2}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  return %y : tensor<?x2x4096xbf16>
}
