// convert-moe-to-loops lowers each primitive moe op to scf loops over buffers:
// the gate's fp32 scoring and arg-max selection, the route's counting sort,
// the grouped matmul's guarded rows with fp32 dots (fp8: scaled per K block,
// channel or tensor) and epilogues, the quantize's amax and scale (or the
// given scale) and e4m3 encoding, the combine's fp32 sums, and the
// completion flags of an expert-parallel exchange.
// RUN: moe-opt %s --convert-moe-to-loops --split-input-file | FileCheck %s

// Softmax scoring: the max over the non-NaN logits; exp(x - max), with
// x - max 0 where x is the max, by the fixed routing polynomial (clamp,
// round by the 1.5 * 2^23 shift, Cody-Waite and Horner fmas, 2^n from the
// exponent bits); the denominator in 32 strided partial sums added pairwise,
// NaN adding 0; bias added for selection only; groups scored by their two
// best; arg-max under "larger wins, NaN loses"; renormalise, scale, shared
// expert.
// CHECK-LABEL: func @gate_softmax_groups
// CHECK-DAG: %[[LOGITS:.*]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x8xbf16> to memref<?x8xbf16>
// CHECK-DAG: %[[BIAS:.*]] = bufferization.to_buffer %{{.*}} read_only : tensor<8xf32> to memref<8xf32>
// CHECK: %[[T:.*]] = memref.dim %[[LOGITS]]
// CHECK: %[[WEIGHTS:.*]] = memref.alloc(%[[T]]) : memref<?x3xf32>
// CHECK: %[[IDS:.*]] = memref.alloc(%[[T]]) : memref<?x3xi32>
// CHECK: %[[SCORES:.*]] = memref.alloc() : memref<8xf32>
// CHECK: %[[PARTIALS:.*]] = memref.alloc() : memref<32xf32>
// CHECK: %[[GROUPS:.*]] = memref.alloc() : memref<4xf32>
// CHECK: scf.for %[[TOKEN:.*]] =
// CHECK:   %[[MAX:[a-z0-9_]+]] = scf.for {{.*}} -> (f32)
// CHECK:     %[[LOGIT:.*]] = arith.extf %{{.*}} : bf16 to f32
// CHECK:     %[[NAN:.*]] = arith.cmpf uno, %[[LOGIT]], %[[LOGIT]]
// CHECK:     %[[NEG_INF:.*]] = arith.constant 0xFF800000 : f32
// CHECK:     %[[OPERAND:.*]] = arith.select %[[NAN]], %[[NEG_INF]], %[[LOGIT]]
// CHECK:     arith.maximumf %{{.*}}, %[[OPERAND]]
// CHECK:   scf.for
// CHECK:     %[[X:.*]] = arith.extf
// CHECK:     %[[IS_MAX:.*]] = arith.cmpf oeq, %[[X]], %[[MAX]]
// CHECK:     %[[ZERO:.*]] = arith.constant 0.0
// CHECK:     %[[DIFF:.*]] = arith.subf %[[X]], %[[MAX]]
// CHECK:     arith.select %[[IS_MAX]], %[[ZERO]], %[[DIFF]]
// CHECK:     arith.constant -8.700000e+01 : f32
// CHECK:     arith.constant 8.800000e+01 : f32
// CHECK:     arith.constant 1.44269502 : f32
// CHECK:     arith.constant 0x4B400000 : f32
// CHECK:     arith.addf
// CHECK:     arith.subf
// CHECK:     arith.constant -0.693359375 : f32
// CHECK:     llvm.intr.fma
// CHECK-COUNT-6: llvm.intr.fma
// CHECK:     arith.addf
// CHECK:     arith.fptosi
// CHECK:     arith.shli
// CHECK:     %[[SCALE:[a-z0-9_]+]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK:     arith.select
// CHECK:     arith.select
// CHECK:     %[[P:[a-z0-9_]+]] = arith.select
// CHECK-NEXT: memref.store %[[P]], %[[SCORES]]
// CHECK:     %[[LANE:[a-z0-9_]+]] = arith.remui %{{.*}}, %c32
// CHECK:     %[[PARTIAL:.*]] = memref.load %[[PARTIALS]][%[[LANE]]]
// CHECK:     %[[P_NAN:.*]] = arith.cmpf uno, %[[P]], %[[P]]
// CHECK:     %[[SUMMAND:.*]] = arith.select %[[P_NAN]], %{{.*}}, %[[P]]
// CHECK:     %[[SUM:.*]] = arith.addf %[[PARTIAL]], %[[SUMMAND]]
// CHECK:     memref.store %[[SUM]], %[[PARTIALS]][%[[LANE]]]
// CHECK:   memref.load %[[PARTIALS]][%c0
// CHECK:   memref.load %[[PARTIALS]][%c1
// CHECK:   arith.addf
// CHECK:   memref.store %{{.*}}, %[[PARTIALS]][%c0
// CHECK:   scf.for
// CHECK:     memref.load %[[SCORES]]
// CHECK:     arith.divf
// CHECK:   memref.load %[[BIAS]]
// CHECK:   arith.addf
// Group scores: best, then best of the rest, summed.
// CHECK:   scf.for
// CHECK:     scf.for {{.*}} -> (index, f32, i1)
// CHECK:       arith.cmpf ogt
// CHECK:       arith.cmpf uno
// CHECK:       arith.cmpf ord
// CHECK:     scf.for {{.*}} -> (index, f32, i1)
// CHECK:       arith.cmpi ne
// CHECK:     arith.addf
// CHECK:     memref.store %{{.*}}, %[[GROUPS]]
// The top_k experts: weights from the unbiased scores, NaN weighs 0.
// CHECK:   scf.for {{.*}} -> (f32)
// CHECK:     arith.index_cast
// CHECK:     memref.store %{{.*}}, %[[IDS]]
// CHECK:     memref.load %[[SCORES]]
// CHECK:     arith.cmpf uno
// CHECK:     arith.select
// CHECK:     memref.store %{{.*}}, %[[WEIGHTS]]
// CHECK:   arith.constant 9.99999968E-21 : f32
// CHECK:   scf.for
// CHECK:     arith.divf
// CHECK:     arith.constant 2.500000e+00 : f32
// CHECK:     arith.mulf
// The shared expert is id 8 with weight 1.
// CHECK:   arith.constant 8 : i32
// CHECK:   memref.store %{{.*}}, %[[IDS]]
// CHECK:   arith.constant 1.000000e+00 : f32
// CHECK:   memref.store %{{.*}}, %[[WEIGHTS]]
// CHECK: bufferization.to_tensor %[[WEIGHTS]] restrict writable
// CHECK: bufferization.to_tensor %[[IDS]] restrict writable
func.func @gate_softmax_groups(%l: tensor<?x8xbf16>, %b: tensor<8xf32>) -> (tensor<?x3xf32>, tensor<?x3xi32>) {
  %w, %i = moe.gate %l bias %b {router = #moe.router<scoring = softmax, top_k = 2, num_groups = 4, topk_groups = 2, renormalize = true, routed_scaling_factor = 2.5, num_shared_experts = 1>}
    : (tensor<?x8xbf16>, tensor<8xf32>) -> (tensor<?x3xf32>, tensor<?x3xi32>)
  return %w, %i : tensor<?x3xf32>, tensor<?x3xi32>
}

// -----

// Sigmoid scoring, 1 / (1 + exp(-x)) with the routing exp, without groups,
// renormalisation or scaling.
// CHECK-LABEL: func @gate_sigmoid
// CHECK-NOT: memref<32xf32>
// CHECK: scf.for
// CHECK:   arith.negf
// CHECK:   llvm.intr.fma
// CHECK:   arith.bitcast
// CHECK:   arith.addf
// CHECK:   arith.divf
// CHECK-NOT: memref<1xf32>
// CHECK-NOT: 9.99999968E-21
// CHECK: return
func.func @gate_sigmoid(%l: tensor<4x16xf32>) -> (tensor<4x4xf32>, tensor<4x4xi32>) {
  %w, %i = moe.gate %l {router = #moe.router<scoring = sigmoid, top_k = 4>}
    : (tensor<4x16xf32>) -> (tensor<4x4xf32>, tensor<4x4xi32>)
  return %w, %i : tensor<4x4xf32>, tensor<4x4xi32>
}

// -----

// Counting sort: sentinel and -1 fills, per-expert counts of in-range ids,
// padded offsets, then stable placement through per-expert cursors.
// CHECK-LABEL: func @route
// CHECK: %[[IDS:[a-z0-9_]+]] = bufferization.to_buffer
// CHECK: %[[T:[a-z0-9_]+]] = memref.dim %[[IDS]]
// CHECK: %[[SLOTS:[a-z0-9_]+]] = arith.muli %[[T]], %c2
// CHECK: %[[CAP:[a-z0-9_]+]] = arith.addi %[[SLOTS]], %c60
// CHECK: %[[BLOCKS:[a-z0-9_]+]] = arith.ceildivui %[[CAP]], %c16
// CHECK: %[[SORTED:[a-z0-9_]+]] = memref.alloc(%[[CAP]]) : memref<?xi32>
// CHECK: %[[EXPERTS:[a-z0-9_]+]] = memref.alloc(%[[BLOCKS]]) : memref<?xi32>
// CHECK: %[[COUNT:[a-z0-9_]+]] = memref.alloc() : memref<i32>
// CHECK: %[[COUNTS:[a-z0-9_]+]] = memref.alloc() : memref<4xi32>
// CHECK: %[[CURSORS:[a-z0-9_]+]] = memref.alloc() : memref<4xi32>
// CHECK: %[[SENTINEL:[a-z0-9_]+]] = arith.index_cast %[[SLOTS]] : index to i32
// CHECK: memref.store %[[SENTINEL]], %[[SORTED]]
// CHECK: memref.store %c-1_i32, %[[EXPERTS]]
// CHECK: scf.for
// CHECK:   scf.for
// CHECK:     arith.cmpi sge
// CHECK:     arith.cmpi slt
// CHECK:     scf.if
// CHECK:       memref.store %{{.*}}, %[[COUNTS]]
// CHECK: %[[TOTAL:[a-z0-9_]+]] = scf.for {{.*}} -> (i32)
// CHECK:   memref.store %{{.*}}, %[[CURSORS]]
// CHECK:   arith.ceildivui
// CHECK:   scf.for
// CHECK:     memref.store %{{.*}}, %[[EXPERTS]]
// CHECK: memref.store %[[TOTAL]], %[[COUNT]][]
// CHECK: scf.if
// CHECK:   memref.load %[[CURSORS]]
// CHECK:   memref.store %{{.*}}, %[[SORTED]]
// CHECK:   memref.store %{{.*}}, %[[CURSORS]]
func.func @route(%ids: tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>) {
  %s, %e, %n = moe.route %ids {num_experts = 4, block_m = 16}
    : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %s, %e, %n : tensor<?xi32>, tensor<?xi32>, tensor<i32>
}

// -----

// Token-order input, SiLU-and-mul: rows clamped to the capacity, guarded on
// the slot and expert ranges, two fp32 dots per column (gate and up halves),
// narrowed to bf16 at the store.
// CHECK-LABEL: func @grouped_matmul_silu
// CHECK: %[[OUT:[a-z0-9_]+]] = memref.alloc() : memref<66x8xbf16>
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK: %[[ROWS:[a-z0-9_]+]] = arith.minui
// CHECK: scf.for %[[R:[a-z0-9_]+]] = %{{.*}} to %[[ROWS]]
// CHECK:   arith.andi
// CHECK:   scf.if
// CHECK:     arith.divui
// CHECK:     arith.remui
// CHECK:     scf.for
// CHECK:       %[[GATE:[a-z0-9_]+]] = scf.for {{.*}} -> (f32)
// CHECK:         arith.extf %{{.*}} : bf16 to f32
// CHECK:         arith.mulf
// CHECK:         arith.addf
// CHECK:       %[[UP:[a-z0-9_]+]] = scf.for {{.*}} -> (f32)
// CHECK:       arith.negf %[[GATE]]
// CHECK:       math.exp
// CHECK:       %[[ACT:[a-z0-9_]+]] = arith.divf %[[GATE]]
// CHECK:       %[[PROD:[a-z0-9_]+]] = arith.mulf %[[ACT]], %[[UP]]
// CHECK:       %[[NARROW:[a-z0-9_]+]] = arith.truncf %[[PROD]] : f32 to bf16
// CHECK:       memref.store %[[NARROW]], %[[OUT]][%[[R]],
func.func @grouped_matmul_silu(%x: tensor<3x32xbf16>, %w: tensor<4x16x32xbf16>, %s: tensor<66xi32>, %e: tensor<5xi32>, %n: tensor<i32>) -> tensor<66x8xbf16> {
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<3x32xbf16>, tensor<4x16x32xbf16>, tensor<66xi32>, tensor<5xi32>, tensor<i32>) -> tensor<66x8xbf16>
  return %o : tensor<66x8xbf16>
}

// -----

// Sorted input, GELU-and-mul, routed weight, scattered to slot order.
// CHECK-LABEL: func @grouped_matmul_gelu_slots
// CHECK: %[[RW:[a-z0-9_]+]] = bufferization.to_buffer %{{.*}} read_only : tensor<3x2xf32>
// CHECK: %[[OUT:[a-z0-9_]+]] = memref.alloc() : memref<3x2x8xf32>
// CHECK: scf.if
// CHECK:   %[[TOKEN:[a-z0-9_]+]] = arith.divui
// CHECK:   %[[SLOT:[a-z0-9_]+]] = arith.remui
// CHECK:   %[[WEIGHT:[a-z0-9_]+]] = memref.load %[[RW]][%[[TOKEN]], %[[SLOT]]]
// CHECK:   scf.for %[[J:[a-z0-9_]+]] =
// CHECK:     math.erf
// CHECK:     %[[WEIGHTED:[a-z0-9_]+]] = arith.mulf %{{.*}}, %[[WEIGHT]]
// CHECK:     memref.store %[[WEIGHTED]], %[[OUT]][%[[TOKEN]], %[[SLOT]], %[[J]]]
func.func @grouped_matmul_gelu_slots(%h: tensor<66x32xf32>, %w: tensor<4x16x32xf32>, %s: tensor<66xi32>, %e: tensor<5xi32>, %n: tensor<i32>, %rw: tensor<3x2xf32>) -> tensor<3x2x8xf32> {
  %o = moe.grouped_matmul %h, %w, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) activation(gelu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<66x32xf32>, tensor<4x16x32xf32>, tensor<66xi32>, tensor<5xi32>, tensor<i32>, tensor<3x2xf32>) -> tensor<3x2x8xf32>
  return %o : tensor<3x2x8xf32>
}

// -----

// Bias and the clamped SwiGLU: each half's fp32 dot plus the expert's bias
// (bf16, widened), then gate = min(gate, 0.5), up = clamp(up, -0.5, 0.5),
// (up + 1) * gate / (1 + exp(-1.702 gate)).
// CHECK-LABEL: func @grouped_matmul_bias_clamped_swiglu
// CHECK-SAME: %[[BIAS_ARG:[a-z0-9_]+]]: tensor<4x16xbf16>
// CHECK: %[[BIAS:[a-z0-9_]+]] = bufferization.to_buffer %[[BIAS_ARG]]
// CHECK: %[[GATE_DOT:[a-z0-9_]+]] = scf.for {{.*}} -> (f32)
// CHECK: %[[GATE_BIAS:[a-z0-9_]+]] = memref.load %[[BIAS]][%[[E:[a-z0-9_]+]], %[[J:[a-z0-9_]+]]]
// CHECK: %[[GATE_BIAS32:[a-z0-9_]+]] = arith.extf %[[GATE_BIAS]] : bf16 to f32
// CHECK: %[[GATE:[a-z0-9_]+]] = arith.addf %[[GATE_DOT]], %[[GATE_BIAS32]]
// CHECK: %[[UP_DOT:[a-z0-9_]+]] = scf.for {{.*}} -> (f32)
// CHECK: memref.load %[[BIAS]][%[[E]], %{{.*}}]
// CHECK: %[[UP:[a-z0-9_]+]] = arith.addf %[[UP_DOT]]
// CHECK-DAG: %[[LIMIT:[a-z0-9_]+]] = arith.constant 5.000000e-01 : f32
// CHECK-DAG: %[[ALPHA:[a-z0-9_]+]] = arith.constant 1.702000e+00 : f32
// CHECK: %[[CLAMPED_GATE:[a-z0-9_]+]] = arith.minimumf %[[GATE]], %[[LIMIT]]
// CHECK: %[[UP_MAX:[a-z0-9_]+]] = arith.minimumf %[[UP]], %[[LIMIT]]
// CHECK: %[[NEG_LIMIT:[a-z0-9_]+]] = arith.negf %[[LIMIT]]
// CHECK: %[[CLAMPED_UP:[a-z0-9_]+]] = arith.maximumf %[[UP_MAX]], %[[NEG_LIMIT]]
// CHECK: %[[SCALED:[a-z0-9_]+]] = arith.mulf %[[ALPHA]], %[[CLAMPED_GATE]]
// CHECK: arith.negf %[[SCALED]]
// CHECK: math.exp
// CHECK: %[[GLU:[a-z0-9_]+]] = arith.divf %[[CLAMPED_GATE]]
// CHECK: %[[UP_PLUS_ONE:[a-z0-9_]+]] = arith.addf %[[CLAMPED_UP]]
// CHECK: arith.mulf %[[UP_PLUS_ONE]], %[[GLU]]
func.func @grouped_matmul_bias_clamped_swiglu(%x: tensor<3x32xbf16>, %w: tensor<4x16x32xbf16>, %b: tensor<4x16xbf16>, %s: tensor<66xi32>, %e: tensor<5xi32>, %n: tensor<i32>) -> tensor<66x8xbf16> {
  %o = moe.grouped_matmul %x, %w, %s, %e, %n bias(%b) input(token) output(sorted) activation(clamped_swiglu) {block_m = 16, num_slots = 2, swiglu = #moe.swiglu<alpha = 1.702, limit = 0.5>}
    : (tensor<3x32xbf16>, tensor<4x16x32xbf16>, tensor<66xi32>, tensor<5xi32>, tensor<i32>, tensor<4x16xbf16>) -> tensor<66x8xbf16>
  return %o : tensor<66x8xbf16>
}

// -----

// CHECK-LABEL: func @combine_weighted
// CHECK: %[[ROWS:[a-z0-9_]+]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x2x8xf16>
// CHECK: %[[W:[a-z0-9_]+]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x2xf32>
// CHECK: %[[OUT:[a-z0-9_]+]] = memref.alloc(%{{.*}}) : memref<?x8xf16>
// CHECK: scf.for %[[T:[a-z0-9_]+]] =
// CHECK:   scf.for %[[H:[a-z0-9_]+]] =
// CHECK:     %[[SUM:[a-z0-9_]+]] = scf.for %[[S:[a-z0-9_]+]] = {{.*}} -> (f32)
// CHECK:       memref.load %[[ROWS]][%[[T]], %[[S]], %[[H]]]
// CHECK:       arith.extf %{{.*}} : f16 to f32
// CHECK:       memref.load %[[W]][%[[T]], %[[S]]]
// CHECK:       arith.mulf
// CHECK:       arith.addf
// CHECK:     arith.truncf %[[SUM]] : f32 to f16
// CHECK: bufferization.to_tensor %[[OUT]] restrict writable
func.func @combine_weighted(%r: tensor<?x2x8xf16>, %w: tensor<?x2xf32>) -> tensor<?x8xf16> {
  %y = moe.combine %r weights(%w) : (tensor<?x2x8xf16>, tensor<?x2xf32>) -> tensor<?x8xf16>
  return %y : tensor<?x8xf16>
}

// -----

// A tiled grouped matmul (moe-tile, moe-tma) computes the same loops; its TMA
// descriptors mean nothing on the CPU and go with it.
// CHECK-LABEL: func @grouped_matmul_tiled
// CHECK-NOT: moe.
// CHECK: scf.for
// CHECK-NOT: moe.
// CHECK: return
func.func @grouped_matmul_tiled(%h: tensor<66x64xbf16>, %w: tensor<4x16x64xbf16>, %s: tensor<66xi32>, %e: tensor<5xi32>, %n: tensor<i32>) -> tensor<66x16xbf16> {
  %h_map = moe.tensor_map %h : tensor<66x64xbf16> -> !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>
  %w_map = moe.tensor_map %w : tensor<4x16x64xbf16> -> !moe.tensor_map<bf16, box = [1, 16, 64], swizzle = 128>
  %o = moe.grouped_matmul %h, %w, %s, %e, %n input_map(%h_map) weights_map(%w_map) input(sorted) output(sorted)
      {block_m = 16, num_slots = 2, config = #moe.gemm_config<block_m = 16, block_n = 16, block_k = 64, num_stages = 3, tma_a = true>}
    : (tensor<66x64xbf16>, tensor<4x16x64xbf16>, tensor<66xi32>, tensor<5xi32>, tensor<i32>,
       !moe.tensor_map<bf16, box = [64, 64], swizzle = 128>, !moe.tensor_map<bf16, box = [1, 16, 64], swizzle = 128>) -> tensor<66x16xbf16>
  return %o : tensor<66x16xbf16>
}

// -----

// With ids, the sum takes only the slots whose ids are in [0, 8), by select
// (an unrouted slot's row may hold NaN).
// CHECK-LABEL: func @combine_masked
// CHECK: %[[ROWS:[a-z0-9_]+]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x2x8xf16>
// CHECK: %[[IDS:[a-z0-9_]+]] = bufferization.to_buffer %{{.*}} read_only : tensor<?x2xi32>
// CHECK: %[[SUM:[a-z0-9_]+]] = scf.for %[[S:[a-z0-9_]+]] = {{.*}} iter_args(%[[ACC:[a-z0-9_]+]] = %{{.*}}) -> (f32)
// CHECK:   memref.load %[[ROWS]][%{{.*}}, %[[S]], %{{.*}}]
// CHECK:   %[[ADDED:[a-z0-9_]+]] = arith.addf %[[ACC]]
// CHECK:   %[[ID:[a-z0-9_]+]] = memref.load %[[IDS]][%{{.*}}, %[[S]]]
// CHECK:   %[[C8:[a-z0-9_]+]] = arith.constant 8 : i32
// CHECK:   arith.cmpi sge, %[[ID]]
// CHECK:   arith.cmpi slt, %[[ID]], %[[C8]]
// CHECK:   %[[IN:[a-z0-9_]+]] = arith.andi
// CHECK:   %[[NEXT:[a-z0-9_]+]] = arith.select %[[IN]], %[[ADDED]], %[[ACC]] : f32
// CHECK:   scf.yield %[[NEXT]]
func.func @combine_masked(%r: tensor<?x2x8xf16>, %ids: tensor<?x2xi32>) -> tensor<?x8xf16> {
  %y = moe.combine %r ids(%ids) {num_experts = 8} : (tensor<?x2x8xf16>, tensor<?x2xi32>) -> tensor<?x8xf16>
  return %y : tensor<?x8xf16>
}

// -----

// FP8, block scales (K = 200: a 128-wide K block and a 72-wide tail): each K
// block's fp32 partial sum of decoded e4m3 products in K order, then
// acc + partial * (input_scale[row, b] * weight_scale[e, n / 128, b]), a
// multiply then an add.
// CHECK-LABEL: func @grouped_matmul_fp8_block
// CHECK-DAG: %[[X:.*]] = bufferization.to_buffer %{{.*}} : tensor<?x200xf8E4M3FN> to memref<?x200xf8E4M3FN>
// CHECK-DAG: %[[XS:.*]] = bufferization.to_buffer %{{.*}} : tensor<?x2xf32> to memref<?x2xf32>
// CHECK-DAG: %[[WS:.*]] = bufferization.to_buffer %{{.*}} : tensor<4x3x2xf32> to memref<4x3x2xf32>
// CHECK: %[[ROWS:[a-z0-9_]+]] = arith.minui
// CHECK: scf.for %[[R:[a-z0-9_]+]] = %{{.*}} to %[[ROWS]]
// CHECK:   %[[SLOT:[a-z0-9_]+]] = arith.index_cast %{{.*}} : i32 to index
// CHECK:   %[[EXPERT:[a-z0-9_]+]] = arith.index_cast %{{.*}} : i32 to index
// CHECK:   scf.if
// CHECK:     scf.for %[[N:[a-z0-9_]+]] =
// CHECK:       %[[ACC:[a-z0-9_]+]] = scf.for %[[BEGIN:[a-z0-9_]+]] = %{{.*}} to %[[K:[a-z0-9_]+]] step %[[B:[a-z0-9_]+]] iter_args(%[[CARRIED:[a-z0-9_]+]] = %{{.*}}) -> (f32)
// CHECK:         %[[NEXT:[a-z0-9_]+]] = arith.addi %[[BEGIN]]
// CHECK:         %[[END:[a-z0-9_]+]] = arith.minui %[[NEXT]], %[[K]]
// CHECK:         %[[KBLOCK:[a-z0-9_]+]] = arith.divui %[[BEGIN]]
// CHECK:         %[[PARTIAL:[a-z0-9_]+]] = scf.for %{{.*}} = %[[BEGIN]] to %[[END]] {{.*}} -> (f32)
// CHECK:           memref.load %[[X]][%[[R]], %{{.*}}] : memref<?x200xf8E4M3FN>
// CHECK:           arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK:           arith.mulf
// CHECK:           arith.addf
// CHECK:         %[[NBLOCK:[a-z0-9_]+]] = arith.divui %[[N]]
// CHECK:         %[[INSCALE:[a-z0-9_]+]] = memref.load %[[XS]][%[[R]], %[[KBLOCK]]]
// CHECK:         %[[WSCALE:[a-z0-9_]+]] = memref.load %[[WS]][%[[EXPERT]], %[[NBLOCK]], %[[KBLOCK]]]
// CHECK:         %[[SCALE:[a-z0-9_]+]] = arith.mulf %[[INSCALE]], %[[WSCALE]]
// CHECK:         %[[SCALED:[a-z0-9_]+]] = arith.mulf %[[PARTIAL]], %[[SCALE]]
// CHECK:         %[[SUM:[a-z0-9_]+]] = arith.addf %[[CARRIED]], %[[SCALED]]
// CHECK:         scf.yield %[[SUM]]
// CHECK:       arith.truncf %[[ACC]] : f32 to bf16
func.func @grouped_matmul_fp8_block(%x: tensor<?x200xf8E4M3FN>, %xs: tensor<?x2xf32>, %w: tensor<4x320x200xf8E4M3FN>, %ws: tensor<4x3x2xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x320xbf16> {
  %o = moe.grouped_matmul %x, %w, %s, %e, %n scales(%xs, %ws) input(sorted) output(sorted) {block_m = 16, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>}
    : (tensor<?x200xf8E4M3FN>, tensor<4x320x200xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x3x2xf32>) -> tensor<?x320xbf16>
  return %o : tensor<?x320xbf16>
}

// -----

// FP8, channel and tensor scales: the whole fp32 sum times
// input_scale[token, 0] * weight_scale[e, n] (per channel) or [e] (per tensor).
// CHECK-LABEL: func @grouped_matmul_fp8_channel
// CHECK-DAG: %[[XS:.*]] = bufferization.to_buffer %{{.*}} : tensor<3x1xf32> to memref<3x1xf32>
// CHECK-DAG: %[[WS:.*]] = bufferization.to_buffer %{{.*}} : tensor<4x16xf32> to memref<4x16xf32>
// CHECK: %[[ROWS:[a-z0-9_]+]] = arith.minui
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[ROWS]]
// CHECK: %[[SLOT:[a-z0-9_]+]] = arith.index_cast %{{.*}} : i32 to index
// CHECK: %[[EXPERT:[a-z0-9_]+]] = arith.index_cast %{{.*}} : i32 to index
// CHECK: %[[TOKEN:[a-z0-9_]+]] = arith.divui %[[SLOT]]
// CHECK: scf.for %[[N:[a-z0-9_]+]] =
// CHECK:   %[[DOT:[a-z0-9_]+]] = scf.for %{{.*}} = %[[ZERO:[a-z0-9_]+]] to {{.*}} -> (f32)
// CHECK:   %[[INSCALE:[a-z0-9_]+]] = memref.load %[[XS]][%[[TOKEN]], %[[ZERO]]]
// CHECK:   %[[WSCALE:[a-z0-9_]+]] = memref.load %[[WS]][%[[EXPERT]], %[[N]]]
// CHECK:   %[[SCALE:[a-z0-9_]+]] = arith.mulf %[[INSCALE]], %[[WSCALE]]
// CHECK:   %[[SCALED:[a-z0-9_]+]] = arith.mulf %[[DOT]], %[[SCALE]]
// CHECK:   arith.truncf %[[SCALED]] : f32 to bf16
func.func @grouped_matmul_fp8_channel(%x: tensor<3x64xf8E4M3FN>, %xs: tensor<3x1xf32>, %w: tensor<4x16x64xf8E4M3FN>, %ws: tensor<4x16xf32>, %s: tensor<66xi32>, %e: tensor<5xi32>, %n: tensor<i32>) -> tensor<66x16xbf16> {
  %o = moe.grouped_matmul %x, %w, %s, %e, %n scales(%xs, %ws) input(token) output(sorted) {block_m = 16, num_slots = 2, quantization = #moe.quantization<weights = channel, activations = token>}
    : (tensor<3x64xf8E4M3FN>, tensor<4x16x64xf8E4M3FN>, tensor<66xi32>, tensor<5xi32>, tensor<i32>, tensor<3x1xf32>, tensor<4x16xf32>) -> tensor<66x16xbf16>
  return %o : tensor<66x16xbf16>
}

// CHECK-LABEL: func @grouped_matmul_fp8_tensor
// CHECK-DAG: %[[WS:.*]] = bufferization.to_buffer %{{.*}} : tensor<4xf32> to memref<4xf32>
// CHECK: %[[ROWS:[a-z0-9_]+]] = arith.minui
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[ROWS]]
// CHECK: arith.index_cast %{{.*}} : i32 to index
// CHECK: %[[EXPERT:[a-z0-9_]+]] = arith.index_cast %{{.*}} : i32 to index
// CHECK: %[[DOT:[a-z0-9_]+]] = scf.for {{.*}} -> (f32)
// CHECK: %[[WSCALE:[a-z0-9_]+]] = memref.load %[[WS]][%[[EXPERT]]]
// CHECK: %[[SCALE:[a-z0-9_]+]] = arith.mulf %{{.*}}, %[[WSCALE]]
// CHECK: arith.mulf %[[DOT]], %[[SCALE]]
func.func @grouped_matmul_fp8_tensor(%x: tensor<3x64xf8E4M3FN>, %xs: tensor<3x1xf32>, %w: tensor<4x16x64xf8E4M3FN>, %ws: tensor<4xf32>, %s: tensor<66xi32>, %e: tensor<5xi32>, %n: tensor<i32>) -> tensor<66x16xbf16> {
  %o = moe.grouped_matmul %x, %w, %s, %e, %n scales(%xs, %ws) input(token) output(sorted) {block_m = 16, num_slots = 2, quantization = #moe.quantization<weights = tensor, activations = token>}
    : (tensor<3x64xf8E4M3FN>, tensor<4x16x64xf8E4M3FN>, tensor<66xi32>, tensor<5xi32>, tensor<i32>, tensor<3x1xf32>, tensor<4xf32>) -> tensor<66x16xbf16>
  return %o : tensor<66x16xbf16>
}

// -----

// moe.quantize with rows(%n), groups of 128 of K = 200: rows below
// min(n, M); per group [begin, min(begin + 128, K)) the NaN-propagating amax
// of |x|, scale = max(amax, 1e-10) / 448 stored at [m, begin / 128], and
// each x / scale encoded to its e4m3 code (round to nearest even by the
// 0x7FFFF bias, small magnitudes through 2^23, saturation to 0x7E, NaN to
// 0x7F, sign) stored through an i8 bitcast.
// CHECK-LABEL: func @quantize_rows
// CHECK: %[[X:.*]] = bufferization.to_buffer %{{.*}} : tensor<?x200xbf16> to memref<?x200xbf16>
// CHECK: %[[M:.*]] = memref.dim %[[X]]
// CHECK: %[[Q:.*]] = memref.alloc(%[[M]]) : memref<?x200xf8E4M3FN>
// CHECK: %[[S:.*]] = memref.alloc(%[[M]]) : memref<?x2xf32>
// CHECK: %[[NBUF:.*]] = bufferization.to_buffer %{{.*}} : tensor<i32> to memref<i32>
// CHECK: %[[N:.*]] = memref.load %[[NBUF]][]
// CHECK: %[[NINDEX:.*]] = arith.index_cast %[[N]]
// CHECK: %[[ROWS:.*]] = arith.minui %[[NINDEX]], %[[M]]
// CHECK: scf.for %[[ROW:[a-z0-9_]+]] = %{{.*}} to %[[ROWS]]
// CHECK:   scf.for %[[BEGIN:[a-z0-9_]+]] = %{{.*}} to %[[K:[a-z0-9_]+]] step %[[G:[a-z0-9_]+]] {
// CHECK:     %[[NEXT:.*]] = arith.addi %[[BEGIN]], %{{.*}}
// CHECK:     %[[END:.*]] = arith.minui %[[NEXT]], %[[K]]
// CHECK:     %[[GROUP:.*]] = arith.divui %[[BEGIN]]
// CHECK:     %[[AMAX:[a-z0-9_]+]] = scf.for %{{.*}} = %[[BEGIN]] to %[[END]] {{.*}} -> (f32)
// CHECK:       arith.extf %{{.*}} : bf16 to f32
// CHECK:       math.absf
// CHECK:       arith.maximumf
// CHECK:     %[[FLOOR:.*]] = arith.maximumf %[[AMAX]], %{{.*}} : f32
// CHECK:     %[[SCALE:.*]] = arith.divf %[[FLOOR]], %{{.*}} : f32
// CHECK:     memref.store %[[SCALE]], %[[S]][%[[ROW]], %[[GROUP]]]
// CHECK:     scf.for %[[COL:[a-z0-9_]+]] = %[[BEGIN]] to %[[END]]
// CHECK:       %[[XF:.*]] = arith.extf
// CHECK:       %[[Y:.*]] = arith.divf %[[XF]], %[[SCALE]]
// CHECK:       %[[BITS:.*]] = arith.bitcast %[[Y]] : f32 to i32
// CHECK:       arith.constant 524287 : i32
// CHECK:       arith.constant 0x4B000000 : f32
// CHECK:       %[[SAT:.*]] = arith.minui %{{.*}}, %{{.*}} : i32
// CHECK:       %[[ISNAN:.*]] = arith.cmpi ugt, %{{.*}}, %{{.*}} : i32
// CHECK:       %[[SIGNED:.*]] = arith.ori %[[SAT]]
// CHECK:       %[[CODE:.*]] = arith.select %[[ISNAN]], %{{.*}}, %[[SIGNED]] : i32
// CHECK:       %[[BYTE:.*]] = arith.trunci %[[CODE]] : i32 to i8
// CHECK:       %[[FP8:.*]] = arith.bitcast %[[BYTE]] : i8 to f8E4M3FN
// CHECK:       memref.store %[[FP8]], %[[Q]][%[[ROW]], %[[COL]]]
func.func @quantize_rows(%x: tensor<?x200xbf16>, %n: tensor<i32>) -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>) {
  %q, %s = moe.quantize %x rows(%n) {group_size = 128}
    : (tensor<?x200xbf16>, tensor<i32>) -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>)
  return %q, %s : tensor<?x200xf8E4M3FN>, tensor<?x2xf32>
}

// -----

// moe.quantize with a static scale(%s): s[0] is loaded once, before the
// loops, and no amax is taken: each group stores s[0] as its scale right
// away and divides each x by it.
// CHECK-LABEL: func @quantize_static
// CHECK: %[[S:.*]] = memref.alloc(%{{.*}}) : memref<?x1xf32>
// CHECK: %[[SBUF:.*]] = bufferization.to_buffer %{{.*}} : tensor<1xf32> to memref<1xf32>
// CHECK: %[[SCALE:.*]] = memref.load %[[SBUF]][%{{.*}}] : memref<1xf32>
// CHECK: scf.for %[[ROW:[a-z0-9_]+]] =
// CHECK:   scf.for %[[BEGIN:[a-z0-9_]+]] =
// CHECK:     %[[GROUP:.*]] = arith.divui %[[BEGIN]]
// CHECK-NEXT: memref.store %[[SCALE]], %[[S]][%[[ROW]], %[[GROUP]]]
// CHECK:     scf.for
// CHECK:       arith.divf %{{.*}}, %[[SCALE]] : f32
func.func @quantize_static(%x: tensor<?x64xf16>, %s: tensor<1xf32>) -> (tensor<?x64xf8E4M3FN>, tensor<?x1xf32>) {
  %q, %scales = moe.quantize %x scale(%s) {group_size = 64}
    : (tensor<?x64xf16>, tensor<1xf32>) -> (tensor<?x64xf8E4M3FN>, tensor<?x1xf32>)
  return %q, %scales : tensor<?x64xf8E4M3FN>, tensor<?x1xf32>
}

// -----

// The completion flags of rank 1 of 2 on the CPU path: the signal adds one
// to column 1 of a copy of the flags; the wait compares row 1 with the
// rank's own counter flags[1, 1] (a wrapping difference below 0 is behind)
// and records [phase, s + 1] for the first source behind in a copy of the
// status, unless it holds a failure; its guarded buffer is the operand.
// CHECK-LABEL: func @completion
// CHECK: %[[FLAGS:.*]] = memref.alloc() : memref<2x2xi32>
// CHECK: memref.copy %{{.*}}, %[[FLAGS]]
// CHECK: %[[RANK:.*]] = arith.constant 1 : index
// CHECK: scf.for %[[D:.*]] =
// CHECK:   %[[COUNT:.*]] = memref.load %[[FLAGS]][%[[D]], %[[RANK]]]
// CHECK:   %[[ONE:.*]] = arith.constant 1 : i32
// CHECK:   %[[NEXT:.*]] = arith.addi %[[COUNT]], %[[ONE]]
// CHECK:   memref.store %[[NEXT]], %[[FLAGS]][%[[D]], %[[RANK]]]
// CHECK: %[[SIGNALLED:.*]] = bufferization.to_tensor %[[FLAGS]]
// CHECK: %[[READ:.*]] = bufferization.to_buffer %[[SIGNALLED]] read_only
// CHECK: %[[STATUS:.*]] = memref.alloc() : memref<2xi32>
// CHECK: memref.copy %{{.*}}, %[[STATUS]]
// CHECK: %[[ME:.*]] = arith.constant 1 : index
// CHECK: %[[EPOCH:.*]] = memref.load %[[READ]][%[[ME]], %[[ME]]]
// CHECK: scf.for %[[S:.*]] =
// CHECK:   %[[THEIRS:.*]] = memref.load %[[READ]][%[[ME]], %[[S]]]
// CHECK:   %[[AHEAD:.*]] = arith.subi %[[THEIRS]], %[[EPOCH]]
// CHECK:   %[[BEHIND:.*]] = arith.cmpi slt, %[[AHEAD]], %{{.*}} : i32
// CHECK:   %[[FAILED:.*]] = memref.load %[[STATUS]]
// CHECK:   %[[FIRST:.*]] = arith.cmpi eq, %[[FAILED]], %{{.*}} : i32
// CHECK:   %[[RECORD:.*]] = arith.andi %[[BEHIND]], %[[FIRST]]
// CHECK:   scf.if %[[RECORD]]
// CHECK:     %[[PHASE:.*]] = arith.constant 2 : i32
// CHECK:     memref.store %[[PHASE]], %[[STATUS]]
// CHECK:     %[[SOURCE:.*]] = arith.addi %[[S]], %{{.*}} : index
// CHECK:     %[[SOURCE32:.*]] = arith.index_cast %[[SOURCE]] : index to i32
// CHECK:     memref.store %[[SOURCE32]], %[[STATUS]]
// CHECK: %[[WAITED:.*]] = bufferization.to_tensor %[[STATUS]]
// CHECK: return %[[SIGNALLED]], %[[WAITED]], %arg2
func.func @completion(%flags: tensor<2x2xi32>, %status: tensor<2xi32>,
                      %returned: tensor<2x4x3x64xbf16>)
    -> (tensor<2x2xi32>, tensor<2xi32>, tensor<2x4x3x64xbf16>) {
  %signalled = moe.ep_signal into(%flags)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>}
    : (tensor<2x2xi32>) -> tensor<2x2xi32>
  %waited, %ready = moe.ep_wait %signalled into(%status) guards(%returned)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 2}
    : (tensor<2x2xi32>, tensor<2xi32>, tensor<2x4x3x64xbf16>)
      -> (tensor<2xi32>, tensor<2x4x3x64xbf16>)
  return %signalled, %waited, %ready
    : tensor<2x2xi32>, tensor<2xi32>, tensor<2x4x3x64xbf16>
}
