// convert-moe-to-gpu with cluster_m = 2: two consecutive blocks (row blocks
// of one column tile) form a cluster (nvvm.cluster_dim, the grid a whole
// number of clusters). When both have work and one expert, each block's
// leader TMA-loads half of every weight box (moe-tma's box: 32 of the gated
// tile's 64 rows) and multicasts it to both; else it loads both halves
// alone. `empty` then also counts the peer's 4 consumer warps, which arrive
// from their lane 0 through mapa; both blocks' barriers are initialised
// before either loads, and neither leaves before both are done (cluster
// arrive and wait).
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK: moe.tensor_map %{{.*}} -> !moe.tensor_map<bf16, box = [1, 32, 64], swizzle = 128>
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: grid = ["cdiv(T*2+min(T*2,4)*63,128)*4", "1", "1"], block = [256, 1, 1]
// CHECK-SAME: nvvm.cluster_dim = array<i32: 2, 1, 1>
// CHECK: %[[FULL:.*]] = nvgpu.mbarrier.create
// CHECK: %[[EMPTY:.*]] = nvgpu.mbarrier.create
// The pair multicasts: its tiles are active and one expert's.
// CHECK: %[[SAME:.*]] = arith.cmpi eq
// CHECK: %[[MULTICAST:.*]] = arith.andi %{{.*}}, %[[SAME]]
// CHECK: %[[EMPTY_ARRIVALS:.*]] = arith.select %[[MULTICAST]], %c8, %c4
// CHECK: nvgpu.mbarrier.init %[[EMPTY]][%{{.*}}], %[[EMPTY_ARRIVALS]]
// CHECK: nvvm.fence.mbarrier.init
// CHECK: gpu.barrier
// CHECK: scf.if %[[MULTICAST]] {
// CHECK-NEXT: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// Producer: this block's half for both, or both halves alone.
// CHECK: scf.if %[[MULTICAST]] {
// CHECK: nvgpu.tma.async.load {{.*}} multicast_mask = %c3_i16 : <tensor = memref<1x32x64xbf16, 3>
// CHECK: } else {
// CHECK-COUNT-2: nvgpu.tma.async.load {{.*}} : <tensor = memref<1x32x64xbf16, 3>
// Consumers: lane 0 of each warp frees the stage in the peer too.
// CHECK: nvgpu.mbarrier.arrive %[[EMPTY]]
// CHECK: %[[BARRIER:.*]] = nvgpu.mbarrier.get %[[EMPTY]]
// CHECK: %[[LOCAL:.*]] = llvm.inttoptr %[[BARRIER]] : i32 to !llvm.ptr<3>
// CHECK: %[[REMOTE:.*]] = nvvm.mapa %[[LOCAL]], %{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: nvvm.mbarrier.arrive %[[REMOTE]] : !llvm.ptr<7>
// CHECK: scf.if %[[MULTICAST]] {
// CHECK-NEXT: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
func.func @gemm(%x: tensor<?x128xbf16>, %w13: tensor<4x256x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x128xbf16> {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, cluster_m = 2, warp_specialized = true>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  return %up : tensor<?x128xbf16>
}
