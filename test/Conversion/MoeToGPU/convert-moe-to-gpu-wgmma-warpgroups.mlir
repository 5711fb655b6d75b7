// convert-moe-to-gpu with num_warpgroups = 2 (routing blocks of 128 rows):
// each block takes 128 rows of one expert in 256 threads, warpgroup w the
// rows [64 w, 64 w + 64) against the block's one weight tile; the row tile of
// a stage holds all 128 rows (a 128-row TMA box for sorted rows, four passes
// of 32 gathered rows for token rows), and warpgroup 1's wgmma descriptors
// start 8 KiB (512 descriptor units) after warpgroup 0's.
// RUN: moe-opt %s --moe-tile="tokens=128" --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK: gpu.module @moe_kernels
// CHECK-SAME: <"arg5_map" over "arg5" box [128, 64] swizzle 128>

// gemm1: 4 stages of 16 KiB rows + 32 KiB weights (block_n 256).
// CHECK: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: grid = ["cdiv(T*2+min(T*2,4)*127,128)", "1", "1"], block = [256, 1, 1], smem = 196608
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// CHECK-COUNT-4: nvgpu.device_async_copy {{.*}} : memref<128x128xbf16> to memref<128x64xbf16, 3>
// CHECK: %[[WARPGROUP:.*]] = arith.divui %thread_id_x, %c128
// CHECK: arith.muli %[[WARPGROUP]], %c512
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>

// gemm2: sorted rows and weights by TMA, 16 KiB + 16 KiB a stage.
// CHECK: gpu.func @moe_grouped_matmul_wgmma_1(
// CHECK-SAME: grid = ["cdiv(T*2+min(T*2,4)*127,128)", "1", "1"], block = [256, 1, 1], smem = 131072
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// CHECK: nvgpu.tma.async.load {{.*}} -> memref<128x64xbf16, 3>
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>
func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x256x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x128xbf16>, %w2: tensor<4x128x128xbf16>, %rw: tensor<?x2xf32>)
    -> (tensor<?x128xbf16>, tensor<?x2x128xbf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x128xbf16>
  return %up, %down : tensor<?x128xbf16>, tensor<?x2x128xbf16>
}
