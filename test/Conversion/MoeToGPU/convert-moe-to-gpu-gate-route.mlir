// At decode convert-moe-to-gpu gives the gate to the route's single block:
// warp w of its 16 gates token w, the route's first barrier orders the ids
// those warps store before any thread loads them, and one launch replaces
// two. Past 16 tokens the gate keeps its kernel; so it does for a route
// that an op taking the gate's results precedes (the gate's first route
// computes them). The block first fills every row of the sorted ids (up to
// the capacity T*S + E*(block_m - 1)) with the sentinel T*S and every block
// of the expert ids with -1, each thread a row or block in 512, before the
// gate: the real rows and blocks go over them after barriers.
// RUN: moe-opt %s --split-input-file --convert-moe-to-gpu="tokens-max=1024 tokens=16" | FileCheck %s
// RUN: moe-opt %s --split-input-file --convert-moe-to-gpu="tokens-max=1024 tokens=17" | FileCheck %s --check-prefix=APART

// CHECK-LABEL: gpu.func @moe_gate_route_block_0(
// CHECK-SAME: %[[LOGITS:[a-z0-9]+]]: memref<1024x128xf32>, %[[WEIGHTS:[a-z0-9]+]]: memref<1024x8xf32>, %[[IDS:[a-z0-9]+]]: memref<1024x8xi32>, %[[SORTED:[a-z0-9]+]]: memref<16256xi32>, %[[BLOCKS:[a-z0-9]+]]: memref<254xi32>
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [512, 1, 1], smem = 0, args = ["arg0", "result0", "result1", "result2", "result3", "result4", i32 "T"], dependent = true>
// CHECK: %[[SLOTS:.*]] = arith.muli %{{.*}}, %c8 : index
// CHECK: %[[SENTINEL:.*]] = arith.index_cast %[[SLOTS]] : index to i32
// CHECK: %[[CAPACITY:.*]] = arith.addi %[[SLOTS]], %c8064 : index
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %[[CAPACITY]] step %c512
// CHECK-NEXT: memref.store %[[SENTINEL]], %[[SORTED]][%[[ROW]]]
// CHECK: %[[NUM_BLOCKS:.*]] = arith.ceildivui %[[CAPACITY]], %c64
// CHECK: scf.for %[[BLOCK:.*]] = %{{.*}} to %[[NUM_BLOCKS]] step %c512
// CHECK: memref.store %c-1_i32, %[[BLOCKS]][%[[BLOCK]]]
// CHECK: %[[WARP:.*]] = arith.divui %{{.*}}, %c32
// CHECK: arith.cmpi ult, %[[WARP]]
// CHECK: scf.if
// CHECK: memref.load %[[LOGITS]][%[[WARP]],
// CHECK: nvvm.redux.sync umax
// CHECK: memref.store %{{.*}}, %[[IDS]][%[[WARP]],
// CHECK: memref.store %{{.*}}, %[[WEIGHTS]][%[[WARP]],
// CHECK: gpu.barrier
// CHECK: memref.load %[[IDS]]
// CHECK: memref.atomic_rmw addi
// CHECK-NOT: gpu.func @moe_gate_
// APART: gpu.func @moe_gate_0(
// APART: gpu.func @moe_route_block_1(
func.func @decode(%logits: tensor<?x128xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) {
  %w, %ids = moe.gate %logits {router = #moe.router<scoring = softmax, top_k = 8, renormalize = true>}
    : (tensor<?x128xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>)
  %s, %e, %n = moe.route %ids {num_experts = 128, block_m = 64}
    : (tensor<?x8xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %w, %ids, %s, %e, %n : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>
}

// -----

// The second route reads ids the first route's block computed.
// CHECK-LABEL: gpu.func @moe_gate_route_block_0(
// CHECK-LABEL: gpu.func @moe_route_block_1(
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [512, 1, 1], smem = 0, args = ["result1", "result5", "result6", "result7", i32 "T"], dependent = true>
// CHECK-NOT: gpu.func @moe_gate_
func.func @two_routes(%logits: tensor<?x128xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) {
  %w, %ids = moe.gate %logits {router = #moe.router<scoring = softmax, top_k = 8, renormalize = true>}
    : (tensor<?x128xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>)
  %s, %e, %n = moe.route %ids {num_experts = 128, block_m = 64}
    : (tensor<?x8xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %s2, %e2, %n2 = moe.route %ids {num_experts = 128, block_m = 16}
    : (tensor<?x8xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %w, %ids, %s, %e, %n, %s2, %e2, %n2 : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>
}
