// moe-split-k splits the K loop of a tiled grouped matmul whose tiles at
// `tokens` fill at most half the GPU, keeping num_stages K tiles and 1 MiB of
// weights per split; tiles that fill it, small weights and configs that are
// already split are left alone.
// RUN: moe-opt %s --moe-split-k="tokens=1" | FileCheck %s
// RUN: moe-opt %s --moe-split-k="tokens=4096" | FileCheck %s --check-prefix=PREFILL
// RUN: moe-opt %s --moe-split-k="tokens=256" | FileCheck %s --check-prefix=HALF
// RUN: not moe-opt %s --moe-split-k="num-sms=0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not moe-opt %s --moe-split-k="num-sms=4611686018427387904" 2>&1 | FileCheck %s --check-prefix=BAD-SMS
// RUN: not moe-opt %s --moe-split-k="tokens=1073741824" 2>&1 | FileCheck %s --check-prefix=BAD-ROWS

// BAD: moe-split-k: num-sms must be in [1, 1024], got 0
// BAD-SMS: moe-split-k: num-sms must be in [1, 1024], got 4611686018427387904
// The heuristic would count 2^31 rows of Mixtral's 2 slots at 2^30 tokens.
// BAD-ROWS: 'moe.grouped_matmul' op moe-split-k: tokens = 1073741824: T*S + E*(block_m-1) = 1073741824*2 + 8*(64-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)

// Mixtral-8x7B's second GEMM at 1 token: 2 experts x 32 N tiles = 64 tiles
// for 132 SMs, 3.5 MiB of weights per tile: three splits.
// CHECK-LABEL: func.func @mixtral_down
// CHECK: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 3, tma_a = true>
// PREFILL-LABEL: func.func @mixtral_down
// PREFILL: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>
// At 256 tokens its 8 experts' 64 rows each make 8 x 32 = 256 tiles, which fill
// the GPU; with 256-column tiles they would be 128, which a split could lift
// by 4 of 132 only: splits need the tiles to leave half the GPU idle.
// HALF-LABEL: func.func @mixtral_down
// HALF: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>
// HALF-LABEL: func.func @mixtral_down_wide
// HALF: config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4, tma_a = true>
func.func @mixtral_down(%h: tensor<?x14336xbf16>, %w2: tensor<8x4096x14336xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>) -> tensor<?x2x4096xbf16> {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  return %y : tensor<?x2x4096xbf16>
}

// At 1 token, 256-column tiles: 2 experts x 16 = 32 tiles, five splits.
// CHECK-LABEL: func.func @mixtral_down_wide
// CHECK: split_k = 5,
func.func @mixtral_down_wide(%h: tensor<?x14336xbf16>, %w2: tensor<8x4096x14336xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>) -> tensor<?x2x4096xbf16> {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4, tma_a = true>}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  return %y : tensor<?x2x4096xbf16>
}

// Qwen3-30B-A3B's second GEMM at 1 token: few tiles, but 192 KiB of weights
// per tile, not worth a second launch.
// CHECK-LABEL: func.func @qwen3_down
// CHECK: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>
func.func @qwen3_down(%h: tensor<?x768xbf16>, %w2: tensor<128x2048x768xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x8xf32>) -> tensor<?x8x2048xbf16> {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 8, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>}
    : (tensor<?x768xbf16>, tensor<128x2048x768xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x8xf32>) -> tensor<?x8x2048xbf16>
  return %y : tensor<?x8x2048xbf16>
}

// Already split, tuned (moe-tile took it from a config database) and
// untiled: kept.
// CHECK-LABEL: func.func @kept
// CHECK: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 2, tma_a = true>
// CHECK: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>, moe.tuned
// CHECK: moe.grouped_matmul
// CHECK-NOT: config
// CHECK-SAME: num_slots = 2
func.func @kept(%h: tensor<?x14336xbf16>, %w2: tensor<8x4096x14336xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>) -> (tensor<?x2x4096xbf16>, tensor<?x2x4096xbf16>, tensor<?x2x4096xbf16>) {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 2, tma_a = true>}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  %t = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 2, moe.tuned, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  %z = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) {block_m = 64, num_slots = 2}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  return %y, %t, %z : tensor<?x2x4096xbf16>, tensor<?x2x4096xbf16>, tensor<?x2x4096xbf16>
}

// A K of 2^20 at one token would take a split per multiprocessor (132); the
// reduction sums the splits unrolled, so they stop at 64.
// CHECK-LABEL: func.func @deep_k
// CHECK: split_k = 64,
func.func @deep_k(%h: tensor<?x1048576xbf16>, %w2: tensor<1x128x1048576xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x1xf32>) -> tensor<?x1x128xbf16> {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 1, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, tma_a = true>}
    : (tensor<?x1048576xbf16>, tensor<1x128x1048576xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x1xf32>) -> tensor<?x1x128xbf16>
  return %y : tensor<?x1x128xbf16>
}
