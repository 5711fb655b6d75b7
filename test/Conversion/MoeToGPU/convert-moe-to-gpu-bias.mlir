// convert-moe-to-gpu adds a grouped matmul's bias to each fp32 sum of the
// tile's expert before the activation, in every kernel: the wgmma epilogue
// (each accumulator's column clamped to the last output column, so that a
// ragged tile never reads past the bias row; the up half's bias I rows
// further), the split-K reduction (once, after the splits are added; the
// splits store bare sums and take no bias) and the SIMT kernel (before the
// routed weight); then the clamped SwiGLU of #moe.swiglu.
// RUN: moe-opt %s --split-input-file --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// I = 96: two tiles of 64 output columns, the second ragged.
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: %{{.*}}: memref<i32>, %[[BIAS:[a-z0-9]+]]: memref<4x192xbf16>, %[[OUT:[a-z0-9]+]]: memref<508x96xbf16>
// CHECK-SAME: args = ["arg0", map "arg1_map", "arg3", "arg4", "arg5", "arg2", "result0", i32 "T"]
// CHECK: %[[EXPERT_I32:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<8xi32>
// CHECK: %[[EXPERT:.*]] = arith.index_cast %[[EXPERT_I32]]
// CHECK: %[[GATE_SUM:.*]] = llvm.extractvalue %[[ACC:.*]][0]
// CHECK: %[[GATE_COLUMN:.*]] = arith.minui %[[COLUMN:.*]], %c95
// CHECK: %[[GATE_BIAS:.*]] = memref.load %[[BIAS]][%[[EXPERT]], %[[GATE_COLUMN]]]
// CHECK: %[[GATE_BIAS32:.*]] = arith.extf %[[GATE_BIAS]] : bf16 to f32
// CHECK: %[[GATE:.*]] = arith.addf %[[GATE_SUM]], %[[GATE_BIAS32]]
// CHECK: %[[UP_SUM:.*]] = llvm.extractvalue %[[ACC]][32]
// CHECK: %[[UP_COLUMN:.*]] = arith.minui %[[COLUMN]], %c95
// CHECK: %[[UP_ROW:.*]] = arith.addi %[[UP_COLUMN]], %c96
// CHECK: memref.load %[[BIAS]][%[[EXPERT]], %[[UP_ROW]]]
// CHECK: %[[UP:.*]] = arith.addf %[[UP_SUM]]
// CHECK: %[[LIMIT:.*]] = arith.constant 7.000000e+00 : f32
// CHECK: arith.minimumf %[[GATE]], %[[LIMIT]]
// CHECK: %[[UP_CLAMPED:.*]] = arith.minimumf %[[UP]], %[[LIMIT]]
// CHECK: arith.maximumf %[[UP_CLAMPED]]
// CHECK: math.exp
// CHECK: vector.store %{{.*}}, %[[OUT]]
func.func @wgmma(%x: tensor<?x128xbf16>, %w13: tensor<4x192x128xbf16>, %b: tensor<4x192xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x96xbf16> {
  %h = moe.grouped_matmul %x, %w13, %s, %e, %n bias(%b) input(token) output(sorted) activation(clamped_swiglu)
      {block_m = 64, num_slots = 2, swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4>}
    : (tensor<?x128xbf16>, tensor<4x192x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<4x192xbf16>) -> tensor<?x96xbf16>
  return %h : tensor<?x96xbf16>
}

// -----

// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: %{{.*}}: memref<i32>, %{{.*}}: memref<2x256x192xf32>, %{{.*}}: memref<256xi32>, %{{.*}}: i32)
// CHECK-SAME: args = ["arg0", map "arg1_map", "arg3", "arg4", "arg5", "gemm_partials", "gemm_slot_rows", i32 "T"]
// CHECK-NOT: memref<4x192xf32>
// CHECK-LABEL: gpu.func @moe_grouped_matmul_reduce_1(
// CHECK-SAME: %[[PARTIALS:[a-z0-9]+]]: memref<2x256x192xf32>, %{{.*}}: memref<256xi32>, %{{.*}}: memref<508xi32>, %{{.*}}: memref<i32>, %[[BIAS:[a-z0-9]+]]: memref<4x192xf32>, %[[EXPERTS:[a-z0-9]+]]: memref<8xi32>
// CHECK-SAME: args = ["gemm_partials", "gemm_slot_rows", "arg3", "arg5", "arg2", "arg4", "result0", i32 "T"]
// CHECK: %[[ROW_I32:.*]] = memref.load %{{.*}}[%[[SLOT:.*]]] : memref<256xi32>
// CHECK: %[[ROW:.*]] = arith.index_cast %[[ROW_I32]]
// CHECK: scf.if
// CHECK: %[[BLOCK:.*]] = arith.divui %[[ROW]], %c64
// CHECK: %[[EXPERT_I32:.*]] = memref.load %[[EXPERTS]][%[[BLOCK]]]
// CHECK: %[[EXPERT:.*]] = arith.index_cast %[[EXPERT_I32]]
// CHECK: memref.load %[[PARTIALS]][%c0{{.*}}, %[[SLOT]], %[[COLUMN:.*]]]
// CHECK: %[[FIRST:.*]] = arith.addf
// CHECK: memref.load %[[PARTIALS]][%c1{{.*}}, %[[SLOT]], %[[COLUMN]]]
// CHECK: %[[SUM:.*]] = arith.addf %[[FIRST]]
// CHECK: %[[GATE_BIAS:.*]] = memref.load %[[BIAS]][%[[EXPERT]], %[[COLUMN]]]
// CHECK: %[[GATE:.*]] = arith.addf %[[SUM]], %[[GATE_BIAS]]
// CHECK: %[[UP_ROW:.*]] = arith.addi %[[COLUMN]], %c96
// CHECK: memref.load %[[BIAS]][%[[EXPERT]], %[[UP_ROW]]]
// CHECK: arith.minimumf %[[GATE]]
// CHECK: math.exp
func.func @split_k(%x: tensor<?x128xbf16>, %w13: tensor<4x192x128xbf16>, %b: tensor<4x192xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x96xbf16> {
  %h = moe.grouped_matmul %x, %w13, %s, %e, %n bias(%b) input(token) output(sorted) activation(clamped_swiglu)
      {block_m = 64, num_slots = 2, swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>, config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, split_k = 2>}
    : (tensor<?x128xbf16>, tensor<4x192x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<4x192xf32>) -> tensor<?x96xbf16>
  return %h : tensor<?x96xbf16>
}

// -----

// CHECK-LABEL: gpu.func @moe_grouped_matmul_0(
// CHECK-SAME: %{{.*}}: memref<128x2xf32>, %[[BIAS:[a-z0-9]+]]: memref<4x24xf32>, %[[OUT:[a-z0-9]+]]: memref<128x2x24xf32>
// CHECK: %[[EXPERT_I32:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<20xi32>
// CHECK: %[[EXPERT:.*]] = arith.index_cast %[[EXPERT_I32]]
// CHECK: %[[SUMS:.*]]:4 = scf.for
// CHECK: %[[WEIGHT:.*]] = memref.load %{{.*}} : memref<128x2xf32>
// CHECK: %[[ROW_BIAS:.*]] = memref.load %[[BIAS]][%[[EXPERT]], %[[COLUMN:.*]]]
// CHECK: %[[BIASED:.*]] = arith.addf %[[SUMS]]#0, %[[ROW_BIAS]]
// CHECK: %[[WEIGHTED:.*]] = arith.mulf %[[BIASED]], %[[WEIGHT]]
// CHECK: memref.store %[[WEIGHTED]], %[[OUT]][%{{.*}}, %{{.*}}, %[[COLUMN]]]
func.func @simt(%x: tensor<?x32xf32>, %w2: tensor<4x24x32xf32>, %b: tensor<4x24xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>) -> tensor<?x2x24xf32> {
  %y = moe.grouped_matmul %x, %w2, %s, %e, %n routed_weights(%rw) bias(%b) input(sorted) output(slot)
      {block_m = 16, num_slots = 2}
    : (tensor<?x32xf32>, tensor<4x24x32xf32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x24xf32>) -> tensor<?x2x24xf32>
  return %y : tensor<?x2x24xf32>
}
