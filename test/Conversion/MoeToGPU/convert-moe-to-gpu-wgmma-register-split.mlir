// convert-moe-to-gpu on warp-specialized fp8 GEMMs with block scales, one
// consumer warpgroup and a tile per block: the kernel launches at 128
// registers a thread (.maxnreg, two blocks of 256 threads per
// multiprocessor) and, at the role split, every thread of the producer
// warpgroup hands registers to the consumers (setmaxnreg): down to 40 when
// the leader alone loads by TMA, 88 when all its threads gather token rows;
// the consumers up to 216 and 168, what the pool of 2 x 128 x 128 holds.
// Persistent grids keep the registers they launch with.
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: nvvm.maxnreg = 128 : i32
// CHECK: %[[PRODUCER:.*]] = arith.cmpi uge, %[[WARPGROUP:.*]], %c1
// CHECK-NEXT: scf.if %[[PRODUCER]] {
// CHECK-NEXT: nvvm.setmaxregister  decrease 88
// CHECK: %[[CONSUMER:.*]] = arith.cmpi ult, %[[WARPGROUP]], %c1
// CHECK-NEXT: scf.if %[[CONSUMER]] {
// CHECK-NEXT: nvvm.setmaxregister  increase 168
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_1(
// CHECK-SAME: nvvm.maxnreg = 128 : i32
// CHECK: %[[PRODUCER:.*]] = arith.cmpi uge, %[[WARPGROUP:.*]], %c1
// CHECK-NEXT: scf.if %[[PRODUCER]] {
// CHECK-NEXT: nvvm.setmaxregister  decrease 40
// CHECK-NEXT: scf.if %{{.*}} {
// CHECK: %[[CONSUMER:.*]] = arith.cmpi ult, %[[WARPGROUP]], %c1
// CHECK-NEXT: scf.if %[[CONSUMER]] {
// CHECK-NEXT: nvvm.setmaxregister  increase 216
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_2(
// CHECK-NOT: maxnreg
// CHECK-NOT: nvvm.setmaxregister
// CHECK: gpu.return
func.func @gemms(%q: tensor<?x256xf8E4M3FN>, %w13: tensor<4x256x256xf8E4M3FN>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %rs: tensor<?x2xf32>, %ws13: tensor<4x2x2xf32>,
                 %h: tensor<?x128xf8E4M3FN>, %w2: tensor<4x256x128xf8E4M3FN>, %rw: tensor<?x2xf32>,
                 %hs: tensor<?x1xf32>, %ws2: tensor<4x2x1xf32>)
    -> (tensor<?x128xbf16>, tensor<?x2x256xbf16>, tensor<?x2x256xbf16>) {
  %up = moe.grouped_matmul %q, %w13, %s, %e, %n scales(%rs, %ws13) input(token) output(sorted) activation(silu_and_mul)
    {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>,
     config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 128, num_stages = 4, warp_specialized = true>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x256x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x2x2xf32>) -> tensor<?x128xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) scales(%hs, %ws2) input(sorted) output(slot)
    {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>,
     config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 128, num_stages = 4, tma_a = true, warp_specialized = true>}
    : (tensor<?x128xf8E4M3FN>, tensor<4x256x128xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<?x1xf32>, tensor<4x2x1xf32>) -> tensor<?x2x256xbf16>
  %persistent = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) scales(%hs, %ws2) input(sorted) output(slot)
    {block_m = 64, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>,
     config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 128, num_stages = 4, tma_a = true, persistent = true, warp_specialized = true>}
    : (tensor<?x128xf8E4M3FN>, tensor<4x256x128xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<?x1xf32>, tensor<4x2x1xf32>) -> tensor<?x2x256xbf16>
  return %up, %down, %persistent : tensor<?x128xbf16>, tensor<?x2x256xbf16>, tensor<?x2x256xbf16>
}
