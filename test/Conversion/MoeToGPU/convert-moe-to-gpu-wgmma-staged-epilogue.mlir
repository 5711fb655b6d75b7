// convert-moe-to-gpu's staged epilogue where a row of the output tile is no
// whole number of a pass's chunks: gated 192-column tiles give 96 output
// columns, 12 chunks of 16 bytes a row, so the 256 consumer threads' passes
// over the block's 128 x 12 chunks start mid-row, and each pass finds its
// row and chunk from its own chunk index (tid + 256 p): six passes.
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=256" | FileCheck %s

// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: memref<1020x96xbf16>, %{{.*}}: i32)
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %[[CONSUMERS:.*]]
// CHECK: %[[STAGING:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<0xi8, 3> to memref<128x104xbf16, 3>
// CHECK: vector.store %{{.*}}, %[[STAGING]]
// CHECK: nvvm.barrier id
// CHECK: %[[INDEX0:.*]] = arith.addi %[[TID:.*]], %c0
// CHECK: arith.divui %[[INDEX0]], %c12
// CHECK: %[[INDEX1:.*]] = arith.addi %[[TID]], %c256
// CHECK: %[[ROW1:.*]] = arith.divui %[[INDEX1]], %c12
// CHECK: %[[CHUNK1:.*]] = arith.remui %[[INDEX1]], %c12
// CHECK: %[[COLUMN1:.*]] = arith.muli %[[CHUNK1]], %c8
// CHECK: %[[LOADED:.*]] = vector.load %[[STAGING]][%[[ROW1]], %[[COLUMN1]]] {alignment = 16 : i64} : memref<128x104xbf16, 3>, vector<8xbf16>
// CHECK: vector.store %[[LOADED]], %[[OUT]]
// CHECK-COUNT-4: arith.divui %{{.*}}, %c12
// CHECK-NOT: arith.divui %{{.*}}, %c12
// CHECK: gpu.return
func.func @wide_gated(%x: tensor<?x128xbf16>, %w13: tensor<4x192x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>)
    -> tensor<?x96xbf16> {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 192, block_k = 64, num_stages = 3, num_warpgroups = 2>}
    : (tensor<?x128xbf16>, tensor<4x192x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x96xbf16>
  return %up : tensor<?x96xbf16>
}
