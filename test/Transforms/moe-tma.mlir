// moe-tma gives each grouped matmul whose config loads an operand by TMA
// that operand's moe.tensor_map: the weights through one 3-D map over
// [E, N, K] with boxes of one expert x the tile's rows of N (block_n, or
// block_n / 2 for the gate and up halves of a gated op) x block_k, sorted
// input rows through a 2-D map with boxes of the warpgroups' rows x block_k;
// the swizzle spans a K tile. Gathered token rows, untiled ops and configs
// without TMA get no map; one map serves every op loading the same boxes of
// a tensor, placed where the tensor is defined; maps already present stay.
// RUN: moe-opt %s --moe-tma | FileCheck %s
// RUN: moe-opt %s --moe-tma --moe-tma | FileCheck %s

// CHECK-LABEL: func.func @layer(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<?x128xbf16>, %[[W13:[a-z0-9]+]]: tensor<4x256x128xbf16>, %[[W2:[a-z0-9]+]]: tensor<4x128x128xbf16>,
// CHECK-NEXT: %[[W13_MAP:.*]] = moe.tensor_map %[[W13]] : tensor<4x256x128xbf16> -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
// CHECK-NEXT: %[[W2_MAP:.*]] = moe.tensor_map %[[W2]] : tensor<4x128x128xbf16> -> !moe.tensor_map<bf16, box = [1, 128, 64], swizzle = 128>
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[X]], %[[W13]], {{.*}} weights_map(%[[W13_MAP]]) input(token) output(sorted) activation(silu_and_mul)
// CHECK-NEXT: %[[H_MAP:.*]] = moe.tensor_map %[[H]] : tensor<?x128xbf16> -> !moe.tensor_map<bf16, box = [128, 64], swizzle = 128>
// CHECK-NEXT: moe.grouped_matmul %[[H]], %[[W2]], {{.*}} input_map(%[[H_MAP]]) weights_map(%[[W2_MAP]]) input(sorted) output(slot)
// CHECK-NEXT: moe.grouped_matmul %[[X]], %[[W13]], {{.*}} weights_map(%[[W13_MAP]]) input(token) output(sorted) activation(silu_and_mul)
// CHECK-NEXT: moe.grouped_matmul %[[X]], %[[W13]], %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} input(token) output(sorted) activation(silu_and_mul) {block_m = 128 : i64, num_slots = 2 : i64}
// CHECK-NEXT: moe.grouped_matmul %[[X]], %[[W13]], %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} input(token) output(sorted) activation(silu_and_mul) {block_m = 128 : i64, config = #moe.gemm_config<{{.*}}tma_b = false>
// CHECK-NEXT: return
func.func @layer(%x: tensor<?x128xbf16>, %w13: tensor<4x256x128xbf16>, %w2: tensor<4x128x128xbf16>,
                 %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>)
    -> (tensor<?x2x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %h = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 4, num_warpgroups = 2>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x128xbf16>
  // The same boxes of w13: the same map.
  %again = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 3>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %untiled = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 128, num_slots = 2}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %no_tma = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 4, tma_b = false>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  return %y, %again, %untiled, %no_tma : tensor<?x2x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>
}
