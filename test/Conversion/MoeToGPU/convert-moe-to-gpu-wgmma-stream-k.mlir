// convert-moe-to-gpu with stream_k = true: a persistent grid of G blocks
// walks the whole rounds of its N tiles (from its block index, a grid
// apart) and splits the L = N mod G tiles of the last round into
// P = min(G / L, K tiles / 4) parts along K (here K = 512: 8 K tiles, so at
// most 2), block b taking part b / L of tile b mod L, in one loop over
// both. A part (fewer K tiles than the tile's) stores its sums in the
// block's slot of the workspace, releases them and counts itself on its
// tile's counter (thread 0, between fences), which the plan zeroes before
// every call; the block that counts last (thread 0's answer, OR-reduced
// over the consumers' barrier) sums the P slots in part order and runs the
// epilogue.
// Without a producer (the plain loop), every unit starts with a block
// barrier, as a persistent tile does, and the whole block is the consumers
// the OR barrier spans.
// RUN: moe-opt %s --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK: workspace "stream_sums" : f32 ["min(cdiv(T*2+min(T*2,4)*127,128)*2,132)", "16384"]
// CHECK-SAME: workspace "stream_counters" : i32 ["min(cdiv(T*2+min(T*2,4)*127,128)*2,132)"]
// CHECK-SAME: zero_fill = ["stream_counters", "stream_counters_1"]
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_0(
// CHECK-SAME: %[[SUMS:[a-z0-9]+]]: memref<12x16384xf32>, %[[COUNTERS:[a-z0-9]+]]: memref<12xi32>, %{{.*}}: i32)
// CHECK: %[[BLOCK:.*]] = gpu.block_id x
// CHECK: %[[TILES:.*]] = arith.muli %{{.*}}, %c2
// CHECK: %[[GRID:.*]] = gpu.grid_dim x
// CHECK: %[[ROUNDS:.*]] = arith.divui %[[TILES]], %[[GRID]]
// CHECK: %[[WHOLE_TILES:.*]] = arith.muli %[[ROUNDS]], %[[GRID]]
// CHECK: %[[TAIL:.*]] = arith.subi %[[TILES]], %[[WHOLE_TILES]]
// CHECK: %[[NO_TAIL:.*]] = arith.cmpi eq, %[[TAIL]], %c0
// CHECK: %[[FIT:.*]] = arith.divui %[[GRID]], %[[TAIL]]
// CHECK: %[[CAPPED:.*]] = arith.minui %[[FIT]], %c2
// CHECK: %[[PARTS:.*]] = arith.select %[[NO_TAIL]], %c1{{.*}}, %[[CAPPED]]
// CHECK: %[[WHOLE:.*]] = arith.ceildivui %{{.*}}, %[[GRID]]
// CHECK: %[[UNITS_WITH_PART:.*]] = arith.muli %[[TAIL]], %[[PARTS]]
// CHECK: %[[HAS_PART:.*]] = arith.cmpi ult, %[[BLOCK]], %[[UNITS_WITH_PART]]
// CHECK: %[[DIVISOR:.*]] = arith.select %[[NO_TAIL]], %c1{{.*}}, %[[TAIL]]
// CHECK: %[[PART:.*]] = arith.divui %[[BLOCK]], %[[DIVISOR]]
// CHECK: %[[TILE_IN_TAIL:.*]] = arith.remui %[[BLOCK]], %[[DIVISOR]]
// CHECK: %[[TAIL_TILE:.*]] = arith.addi %[[WHOLE_TILES]], %[[TILE_IN_TAIL]]
// CHECK: %[[PART_K:.*]] = arith.muli %[[PART]], %c8
// CHECK: %[[FIRST:.*]] = arith.divui %[[PART_K]], %[[PARTS]]
// CHECK: scf.for %[[UNIT:.*]] = %c0{{.*}} to %{{.*}} step %c1{{.*}} iter_args(%{{.*}} = %c0{{.*}}) -> (index) {
// CHECK:   %[[IN_TAIL:.*]] = arith.cmpi uge, %[[UNIT]], %[[WHOLE]]
// CHECK:   arith.select %[[IN_TAIL]], %[[TAIL_TILE]]
// CHECK:   arith.select %[[IN_TAIL]], %[[FIRST]], %c0
// The K loop, then: a part has fewer K tiles than the tile's 8.
// CHECK:   nvvm.wgmma.mma_async
// CHECK:   %[[IS_PART:.*]] = arith.cmpi ne, %{{.*}}, %c8
// CHECK:   %[[SUMMED:.*]]:2 = scf.if %[[IS_PART]]
// CHECK:     %[[SLOT:.*]] = gpu.block_id x
// CHECK:     %[[COUNTER:.*]] = arith.remui %[[SLOT]], %[[TAIL]]
// CHECK-COUNT-16: vector.store %{{.*}}, %[[SUMS]][%[[SLOT]], %{{.*}}] {alignment = 16 : i64} : memref<12x16384xf32>, vector<4xf32>
// CHECK:     llvm.fence syncscope("device") acq_rel
// CHECK:     nvvm.barrier id = %{{.*}} number_of_threads = %c256_i32
// CHECK:     scf.if
// CHECK:       llvm.fence syncscope("device") acq_rel
// CHECK:       memref.extract_aligned_pointer_as_index %[[COUNTERS]]
// CHECK:       llvm.atomicrmw add %{{.*}}, %c1_i32{{.*}} syncscope("device") monotonic
// CHECK:       llvm.fence syncscope("device") acq_rel
// CHECK:       arith.subi %[[PARTS]], %c1
// CHECK:     nvvm.inline_ptx "{{.*}}bar.red.or.pred second, 1, 256, counted{{.*}}"
// CHECK:     scf.if
// CHECK:       %[[SLOT0:.*]] = arith.addi %[[COUNTER]], %{{.*}}
// CHECK-COUNT-16: vector.load %[[SUMS]][%[[SLOT0]], %{{.*}}] {alignment = 16 : i64}
// CHECK:       scf.for %[[P:.*]] = %c1{{.*}} to %[[PARTS]]
// CHECK:         %[[AT:.*]] = arith.muli %[[P]], %[[TAIL]]
// CHECK:         %[[SLOTP:.*]] = arith.addi %[[COUNTER]], %[[AT]]
// CHECK:         vector.load %[[SUMS]][%[[SLOTP]], %{{.*}}]
// CHECK:         arith.addf
// CHECK:   scf.if %[[SUMMED]]#1 {
// CHECK:     nvvm.barrier id
// CHECK:     vector.store
// CHECK-LABEL: gpu.func @moe_grouped_matmul_wgmma_1(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %{{.*}} step %c1{{.*}} iter_args(%{{.*}} = %c0{{.*}}) -> (index) {
// CHECK-NEXT: arith.cmpi uge
// CHECK: gpu.barrier
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.inline_ptx "{{.*}}bar.red.or.pred second, 1, 256, counted{{.*}}"
func.func @stream(%h: tensor<?x512xbf16>, %w2: tensor<4x256x512xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>)
    -> (tensor<?x2x256xbf16>, tensor<?x2x256xbf16>) {
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 3, num_warpgroups = 2, tma_a = true, warp_specialized = true, persistent = true, stream_k = true>}
    : (tensor<?x512xbf16>, tensor<4x256x512xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x256xbf16>
  %plain = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 3, num_warpgroups = 2, tma_a = true, persistent = true, stream_k = true>}
    : (tensor<?x512xbf16>, tensor<4x256x512xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x256xbf16>
  return %down, %plain : tensor<?x2x256xbf16>, tensor<?x2x256xbf16>
}
