// convert-moe-to-gpu with warp_specialized = true: the last warpgroup only
// loads, the others only multiply. Two mbarriers per stage: `full` (the
// leader's expect_tx for the TMA bytes, plus, for gathered token rows, one
// arrival per producer thread) and `empty` (one arrival per consumer warp, from lane 0).
// The role is the warpgroup index broadcast from lane 0 (warp-uniform for
// ptxas). The producer waits on `empty` before refilling a stage, and each
// gathering thread reports K tile s on `full` after issuing tile s + 2 (lag =
// stages - 2), behind its own cp.async wait and proxy fence; with TMA-only
// loads the leader alone runs the producer loop. The consumers wait on
// `full`, multiply, and free the previous K tile's stage once its wgmmas are
// done. No block barrier in either loop.
// RUN: moe-opt %s --moe-tile="tokens=128" --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// Token rows, one consumer: 256 threads.
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: block = [256, 1, 1]
// CHECK: %[[FULL:.*]] = nvgpu.mbarrier.create -> <memorySpace = 3 : i64, num_barriers = 4>
// CHECK: %[[EMPTY:.*]] = nvgpu.mbarrier.create -> <memorySpace = 3 : i64, num_barriers = 4>
// CHECK: nvgpu.mbarrier.init %[[FULL]][%{{.*}}], %c129
// CHECK: nvgpu.mbarrier.init %[[EMPTY]][%{{.*}}], %c4
// CHECK: gpu.barrier
// CHECK: gpu.shuffle  idx
// Producer.
// CHECK: scf.for
// CHECK: nvgpu.mbarrier.try_wait.parity %[[EMPTY]]
// CHECK: nvgpu.mbarrier.arrive.expect_tx %[[FULL]]
// CHECK: nvgpu.tma.async.load
// CHECK-COUNT-4: nvvm.inline_ptx "{{.*}}cp.async.cg.shared.global.L2::cache_hint
// CHECK-NEXT: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 2
// CHECK-NEXT: nvvm.fence.proxy
// CHECK: nvgpu.mbarrier.arrive %[[FULL]]
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: scf.for
// CHECK: nvgpu.mbarrier.arrive %[[FULL]]
// Consumer: K tile 0 peeled, then the loop.
// CHECK: nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>, D[<f32>, <zero>]
// CHECK: scf.for
// CHECK: nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NOT: gpu.barrier
// CHECK: nvgpu.mbarrier.arrive %[[EMPTY]]
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0

// Sorted rows by TMA, two consumers: 384 threads, `full` counts the leader
// alone, `empty` the 8 consumer warps.
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_1(
// CHECK-SAME: block = [384, 1, 1]
// CHECK: nvgpu.mbarrier.init %{{.*}}, %c1{{(_[0-9]+)?}} :
// CHECK: nvgpu.mbarrier.init %{{.*}}, %c8
// CHECK-NOT: cp.async.cg
// CHECK: nvvm.inline_ptx "cp.async.bulk.tensor.2d
// CHECK-NOT: nvvm.cp.async
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>
func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x256x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x128xbf16>, %w2: tensor<4x128x128xbf16>, %rw: tensor<?x2xf32>)
    -> (tensor<?x128xbf16>, tensor<?x2x128xbf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4, warp_specialized = true>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 3, num_warpgroups = 2, tma_a = true, warp_specialized = true>}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x128xbf16>
  return %up, %down : tensor<?x128xbf16>, tensor<?x2x128xbf16>
}
