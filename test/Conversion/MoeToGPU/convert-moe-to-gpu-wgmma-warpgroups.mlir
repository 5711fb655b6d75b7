// convert-moe-to-gpu with num_warpgroups = 2 (routing blocks of 128 rows):
// each block takes 128 rows of one expert in 256 threads, warpgroup w the
// rows [64 w, 64 w + 64) against the block's one weight tile; the row tile of
// a stage holds all 128 rows (a 128-row TMA box for sorted rows, four passes
// of 32 gathered rows for token rows), and warpgroup 1's wgmma descriptors
// start 8 KiB (512 descriptor units) after warpgroup 0's. With at most two
// row blocks an expert, both row loads run as PTX of their own under an L2
// evict_last policy.
// RUN: moe-opt %s --moe-tile="tokens=128" --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK: gpu.module @moe_kernels
// CHECK-SAME: <"arg5_map" over "arg5" box [128, 64] swizzle 128>

// gemm1: 4 stages of 16 KiB rows + 32 KiB weights (block_n 256).
// CHECK: gpu.func @moe_grouped_matmul_wgmma_0(%[[X:[a-z0-9]+]]: memref<128x128xbf16>
// CHECK-SAME: grid = ["cdiv(T*2+min(T*2,4)*127,128)", "1", "1"], block = [256, 1, 1], smem = 196608
// T*S = 256 slots over 4 experts in 128-row blocks: at most two blocks an
// expert, so the rows load under L2 evict_last.
// CHECK: %[[SMEM:.*]] = memref.get_global @moe_dynamic_shared_memory
// CHECK: %[[POLICY:.*]] = nvvm.inline_ptx "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;" -> i64
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// A gather: 16 bytes of its token's row of X (K = 128 elements apart) to
// its chunk of the row tile (128 bytes a row), the shared address through
// a generic one and back (Hopper.h's copyAsync says why).
// CHECK: %[[RING:.*]] = memref.extract_aligned_pointer_as_index %[[SMEM]]
// CHECK: %[[STAGE:.*]] = arith.addi %[[RING]], %{{.*}} : index
// CHECK: %[[TILE:.*]] = arith.index_cast %[[STAGE]] : index to i64
// CHECK: %[[ROWS:.*]] = memref.extract_aligned_pointer_as_index %[[X]]
// CHECK: %[[ROWS64:.*]] = arith.index_cast %[[ROWS]] : index to i64
// CHECK: %[[TO:.*]] = arith.addi %[[TILE]], %{{.*}} : i64
// CHECK: %[[TOKEN_ROW:.*]] = arith.muli %{{.*}}, %c128{{.*}} : index
// CHECK: %[[ELEMENT:.*]] = arith.addi %[[TOKEN_ROW]], %{{.*}} : index
// CHECK: %[[BYTE:.*]] = arith.muli %[[ELEMENT]], %c2{{.*}} : index
// CHECK: %[[BYTE64:.*]] = arith.index_cast %[[BYTE]] : index to i64
// CHECK: %[[FROM:.*]] = arith.addi %[[ROWS64]], %[[BYTE64]] : i64
// CHECK: %[[SIZE:.*]] = arith.select %{{.*}}, %c16_i32, %c0_i32{{.*}} : i32
// CHECK: nvvm.inline_ptx "{ .reg .b64 generic, shared; cvta.shared.u64 generic, $0; cvta.to.shared.u64 shared, generic; cp.async.cg.shared.global.L2::cache_hint [shared], [$1], 16, $2, $3; }" ro(%[[TO]], %[[FROM]], %[[SIZE]], %[[POLICY]] : i64, i64, i32, i64)
// CHECK-COUNT-3: nvvm.inline_ptx "{{.*}}cp.async.cg.shared.global.L2::cache_hint
// CHECK: %[[WARPGROUP:.*]] = arith.divui %thread_id_x, %c128
// CHECK: arith.muli %[[WARPGROUP]], %c512
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 256, k = 16>

// gemm2: sorted rows and weights by TMA, 16 KiB + 16 KiB a stage.
// CHECK: gpu.func @moe_grouped_matmul_wgmma_1(%[[ROWMAP:[a-z0-9]+]]: !llvm.ptr
// CHECK-SAME: grid = ["cdiv(T*2+min(T*2,4)*127,128)", "1", "1"], block = [256, 1, 1], smem = 131072
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// The rows' box at (k0, first row) of the map, from the kernel argument, to
// the stage's row tile, its bytes counted on the stage's barrier.
// CHECK: %[[MAP_ADDRESS:.*]] = llvm.ptrtoint %[[ROWMAP]] : !llvm.ptr to i64
// CHECK: %[[BARRIER:.*]] = nvgpu.mbarrier.get %{{.*}}[%{{.*}}] : <memorySpace = 3 : i64, num_barriers = 4> -> i64
// CHECK: nvvm.inline_ptx "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [$0], [$1, {$2, $3}], [$4], $5;" ro(%{{.*}}, %[[MAP_ADDRESS]], %{{.*}}, %{{.*}}, %[[BARRIER]], %{{.*}} : i64, i64, i32, i32, i64, i64)
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>
func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x256x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x128xbf16>, %w2: tensor<4x128x128xbf16>, %rw: tensor<?x2xf32>)
    -> (tensor<?x128xbf16>, tensor<?x2x128xbf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2>}
    : (tensor<?x128xbf16>, tensor<4x256x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x128xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 128, num_slots = 2, config = #moe.gemm_config<block_m = 128, block_n = 128, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x128xbf16>
  return %up, %down : tensor<?x128xbf16>, tensor<?x2x128xbf16>
}
