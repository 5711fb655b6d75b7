// convert-moe-to-gpu on the experts of a layer given their routing
// (moe.fused_experts decomposed): slots whose ids are out of range get no
// row, so no split writes their partial sums or sorted row. Each split-K
// reduction takes a slot as routed only when its recorded row is below the
// padded count and sorted_ids maps that row back to the slot (stale or
// garbage rows cannot pass), and the combine sums only the slots whose ids
// are in [0, num_experts), selecting rather than multiplying (an unwritten
// row may hold NaN).
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK-LABEL: gpu.func @moe_grouped_matmul_reduce_2(
// CHECK-SAME: %[[PARTIALS:[a-z0-9]+]]: memref<2x256x256xf32>, %[[SLOT_ROWS:[a-z0-9]+]]: memref<256xi32>, %[[SORTED:[a-z0-9]+]]: memref<508xi32>, %[[PADDED:[a-z0-9]+]]: memref<i32>, %[[OUT:[a-z0-9]+]]: memref<508x128xbf16>, %{{.*}}: i32)
// CHECK: %[[SLOT:.*]] = arith.divui
// CHECK: scf.if
// CHECK: %[[ROW_I32:.*]] = memref.load %[[SLOT_ROWS]][%[[SLOT]]]
// CHECK: %[[ROW:.*]] = arith.index_cast %[[ROW_I32]]
// CHECK: %[[COUNT_I32:.*]] = memref.load %[[PADDED]][]
// CHECK: %[[COUNT:.*]] = arith.index_cast %[[COUNT_I32]]
// CHECK: %[[BELOW:.*]] = arith.cmpi ult, %[[ROW]], %[[COUNT]]
// CHECK: %[[SAFE:.*]] = arith.select %[[BELOW]], %[[ROW]]
// CHECK: %[[BACK_I32:.*]] = memref.load %[[SORTED]][%[[SAFE]]]
// CHECK: %[[BACK:.*]] = arith.index_cast %[[BACK_I32]]
// CHECK: %[[MINE:.*]] = arith.cmpi eq, %[[BACK]], %[[SLOT]]
// CHECK: %[[ROUTED:.*]] = arith.andi %[[BELOW]], %[[MINE]]
// CHECK: scf.if %[[ROUTED]]
// CHECK: memref.store %{{.*}}, %[[OUT]][%[[ROW]], %{{.*}}]

// CHECK-LABEL: gpu.func @moe_grouped_matmul_reduce_4(
// CHECK-SAME: %{{.*}}: memref<2x256x128xf32>, %{{.*}}: memref<256xi32>, %{{.*}}: memref<508xi32>, %{{.*}}: memref<i32>, %{{.*}}: memref<128x2xf32>, %[[SLOT_OUT:[a-z0-9]+]]: memref<128x2x128xbf16>, %{{.*}}: i32)
// CHECK: arith.cmpi eq
// CHECK: %[[ROUTED2:.*]] = arith.andi
// CHECK: scf.if %[[ROUTED2]]
// CHECK: memref.store %{{.*}}, %[[SLOT_OUT]]

// CHECK-LABEL: gpu.func @moe_combine_5(
// CHECK-SAME: %[[ROWS:[a-z0-9]+]]: memref<128x2x128xbf16>, %[[IDS:[a-z0-9]+]]: memref<128x2xi32>, %{{.*}}: memref<128x128xbf16>, %{{.*}}: i32)
// CHECK: scf.for %[[S:.*]] = %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<8xf32>)
// CHECK: vector.load %[[ROWS]]
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]]
// CHECK: %[[ID:.*]] = memref.load %[[IDS]][%{{.*}}, %[[S]]]
// CHECK: %[[C4:.*]] = arith.constant 4 : i32
// CHECK: arith.cmpi sge, %[[ID]]
// CHECK: arith.cmpi slt, %[[ID]], %[[C4]]
// CHECK: %[[IN:.*]] = arith.andi
// CHECK: %[[NEXT:.*]] = arith.select %[[IN]], %[[SUM]], %[[ACC]] : vector<8xf32>
// CHECK: scf.yield %[[NEXT]]
func.func @experts(%x: tensor<?x128xbf16>, %ids: tensor<?x2xi32>, %rw: tensor<?x2xf32>,
                   %w13: tensor<4x256x128xbf16>, %w2: tensor<4x128x128xbf16>) -> tensor<?x128xbf16> {
  %s, %e, %n = moe.route %ids {num_experts = 4, block_m = 64} : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 2>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %down = moe.grouped_matmul %up, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 2, tma_a = true>}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x128xbf16>
  %y = moe.combine %down ids(%ids) {num_experts = 4} : (tensor<?x2x128xbf16>, tensor<?x2xi32>) -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}
