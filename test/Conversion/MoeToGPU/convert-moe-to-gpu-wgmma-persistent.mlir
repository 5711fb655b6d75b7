// convert-moe-to-gpu with persistent = true: the grid is at most num-sms x the
// blocks a multiprocessor holds (2 of the 96 KiB ring below, 1 of the
// 384-thread warp-specialized block), the barriers are initialised once, and
// each block walks the tiles of the padded rows (counted on the device: the
// padded count / the tile rows x N tiles x splits) from its block index, a
// grid apart, carrying the ring's K tile count: stages and phases run on
// across tiles. Without a producer warpgroup a block barrier starts each tile
// (every thread refills the ring); with one, the consumers also free the
// last stage of a tile, so that the producer can load the next tile during
// the epilogue (which therefore stages its tile behind the ring).
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=128 num-sms=114" | FileCheck %s --check-prefix=PCIE

// PCIE: grid = ["min(cdiv(T*2+min(T*2,4)*63,64)*4,228)", "1", "1"]
// PCIE: grid = ["min(cdiv(T*2+min(T*2,4)*127,128),114)", "1", "1"]

// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: %{{.*}}: memref<i32>
// CHECK-SAME: grid = ["min(cdiv(T*2+min(T*2,4)*63,64)*4,264)", "1", "1"]
// CHECK: %[[FULL:.*]] = nvgpu.mbarrier.create
// CHECK: %[[BLOCK:.*]] = gpu.block_id x
// CHECK: %[[PADDED:.*]] = memref.load %{{.*}}[] : memref<i32>
// CHECK: %[[PADDED_INDEX:.*]] = arith.index_cast %[[PADDED]]
// CHECK: %[[ROW_BLOCKS:.*]] = arith.divui %[[PADDED_INDEX]], %c64
// CHECK: %[[TILES:.*]] = arith.muli %[[ROW_BLOCKS]], %c4
// CHECK-COUNT-4: nvgpu.mbarrier.init %[[FULL]]
// CHECK: gpu.barrier
// CHECK: %[[GRID:.*]] = gpu.grid_dim x
// CHECK: %[[NEXT:.*]] = scf.for %[[TILE:.*]] = %[[BLOCK]] to %[[TILES]] step %[[GRID]] iter_args(%[[RING:.*]] = %c0{{.*}}) -> (index)
// CHECK-NEXT: gpu.barrier
// CHECK-NOT: nvgpu.mbarrier.init
// CHECK: arith.addi %[[RING]]
// CHECK: nvgpu.tma.async.load
// CHECK: nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK: nvvm.wgmma.mma_async
// The tile's K tiles move the ring on.
// CHECK: scf.yield %{{[0-9]+}} : index
// CHECK-NEXT: }
// CHECK-NEXT: gpu.return

// CHECK-LABEL: gpu.func @moe_grouped_matmul_reduce_1(

// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_2(
// CHECK-SAME: grid = ["min(cdiv(T*2+min(T*2,4)*127,128),132)", "1", "1"], block = [384, 1, 1], smem = 133120
// CHECK: %[[FULL2:.*]] = nvgpu.mbarrier.create
// CHECK: %[[EMPTY:.*]] = nvgpu.mbarrier.create
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %c0{{.*}}) -> (index)
// CHECK-NOT: gpu.barrier
// CHECK: nvgpu.mbarrier.try_wait.parity %[[EMPTY]]
// CHECK: nvgpu.tma.async.load
// CHECK: nvgpu.mbarrier.try_wait.parity %[[FULL2]]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT: arith.constant 1 : index
// CHECK-NEXT: arith.subi
// CHECK: nvgpu.mbarrier.arrive %[[EMPTY]]
// The producer fills the ring during the epilogue, so the epilogue stages
// the tile behind it (the ring's 96 KiB), once the consumers are done with
// the last tile's staging.
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: %[[STAGING:.*]] = memref.view %{{.*}}[%c98304{{.*}}][] : memref<0xi8, 3> to memref<128x136xbf16, 3>
// CHECK: vector.store %{{.*}}, %[[STAGING]]
// CHECK: nvvm.barrier id
// CHECK: vector.load %[[STAGING]]
func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x256x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x128xbf16>, %w2: tensor<4x128x128xbf16>, %rw: tensor<?x2xf32>)
    -> (tensor<?x128xbf16>, tensor<?x2x128xbf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 2, persistent = true>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 3, num_warpgroups = 2, tma_a = true, warp_specialized = true, persistent = true>}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x128xbf16>
  return %up, %down : tensor<?x128xbf16>, tensor<?x2x128xbf16>
}
