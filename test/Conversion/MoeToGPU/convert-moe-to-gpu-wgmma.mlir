// convert-moe-to-gpu lowers a bf16/f16 moe.grouped_matmul whose rows are
// 16-byte multiples to the tensor-core kernel its #moe.gemm_config describes
// (here moe-tile's heuristic), loading through the descriptors of moe-tma: one warpgroup per 64 rows x
// block_n accumulator columns, blocks in groups of 16 row blocks; a ring of
// num_stages shared-memory stages with one mbarrier each; weight tiles by TMA
// through one 3-D descriptor over [E, N, K] with 128-byte swizzle (gate and
// up boxes side by side), sorted rows by TMA through a 2-D descriptor, token
// rows by cp.async gathers written in the same swizzle and fenced for the
// async proxy; wgmma.mma_async m64 x block_n x k16 with both operands
// K-major, one group in flight while the freed stage is refilled; the
// epilogue on the accumulator registers (the activation's exp and division
// fast: afn), staged in the ring's shared memory as pairs and stored in
// 16-byte chunks of the block's rows.
// RUN: moe-opt %s --moe-tile="tokens=128" --moe-tma --convert-moe-to-gpu="tokens-max=128" | FileCheck %s

// CHECK: gpu.module @moe_kernels
// CHECK-SAME: <input "arg1" : bf16 ["4", "128", "128"]>
// CHECK-SAME: <input "arg5" : f16 ["T*2+60", "64"]>, <input "arg6" : f16 ["4", "96", "64"]>
// CHECK-SAME: tensor_maps = [<"arg1_map" over "arg1" box [1, 64, 64] swizzle 128>, <"arg6_map" over "arg6" box [1, 64, 64] swizzle 128>, <"arg5_map" over "arg5" box [64, 64] swizzle 128>]>

// The heuristic config for 128 tokens: block_n 128 (64 gated output columns), 4 stages of
// 8 KiB rows + 16 KiB weights.
// CHECK: gpu.func @moe_grouped_matmul_wgmma_0(%[[X:.*]]: memref<128x128xbf16>, %[[MAP:.*]]: !llvm.ptr, %{{.*}}: memref<316xi32>, %{{.*}}: memref<20xi32>, %{{.*}}: memref<i32>, %[[OUT:.*]]: memref<316x64xbf16>, %{{.*}}: i32)
// CHECK-SAME: moe.grid_constant_args = array<i64: 1>, moe.launch = #moe.launch<grid = ["cdiv(T*2+min(T*2,4)*15,16)", "1", "1"], block = [128, 1, 1], smem = 98304, args = ["arg0", map "arg1_map", "arg2", "arg3", "arg4", "result0", i32 "T"], dependent = true>
// CHECK: %[[SLOTS:.*]] = arith.muli %{{.*}}, %c2
// CHECK: %[[SMEM:.*]] = memref.get_global @moe_dynamic_shared_memory
// T*S = 256 slots over 4 experts in 16-row blocks: 4 blocks an expert, so
// the weight tiles are the reused operand, and the rows load without an L2
// policy (nvgpu's ops).
// CHECK-NOT: createpolicy
// CHECK: %[[DESC:.*]] = builtin.unrealized_conversion_cast %[[MAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<1x64x64xbf16, 3>, swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>
// CHECK: %[[FULL:.*]] = nvgpu.mbarrier.create -> <memorySpace = 3 : i64, num_barriers = 4>
// The grid launches a block per row block that can hold rows (T*2 slots
// padded to 16 in at most min(T*2, 4) experts), and the kernel's tile
// order counts the same row blocks.
// CHECK: gpu.block_id x
// CHECK: %[[NONEMPTY:.*]] = arith.minui %[[SLOTS]], %c4
// CHECK: %[[PADDING:.*]] = arith.muli %[[NONEMPTY]], %c15
// CHECK: %[[ROWS:.*]] = arith.addi %[[SLOTS]], %[[PADDING]]
// CHECK: arith.ceildivui %[[ROWS]], %c16
// CHECK: arith.minui
// CHECK: scf.if
// CHECK: nvgpu.tma.prefetch.descriptor %[[DESC]]
// CHECK-COUNT-4: nvgpu.mbarrier.init %[[FULL]]
// CHECK: gpu.barrier
// The descriptors: (address >> 4) | 1 << 16 | (1024 >> 4) << 32 | 1 << 62.
// CHECK: memref.extract_aligned_pointer_as_index %[[SMEM]]
// CHECK: arith.constant 4611686293305360384 : i64
// Prologue: stages 0..2 in flight (weights by TMA, rows by cp.async).
// CHECK: nvgpu.mbarrier.arrive.expect_tx %[[FULL]][%{{.*}}], %c16384
// CHECK: nvgpu.tma.async.load %[[DESC]][%{{.*}}, %{{.*}}, %[[EXPERT:.*]]], %[[FULL]][%{{.*}}] to %{{.*}} : {{.*}} -> memref<1x64x64xbf16, 3>
// CHECK: nvgpu.tma.async.load %[[DESC]][%{{.*}}, %{{.*}}, %[[EXPERT]]], %[[FULL]][%{{.*}}] to %{{.*}} : {{.*}} -> memref<1x64x64xbf16, 3>
// CHECK-COUNT-4: nvgpu.device_async_copy %[[X]][%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}], 8, %{{.*}} {bypassL1} : memref<128x128xbf16> to memref<64x64xbf16, 3>
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 2
// CHECK-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: gpu.barrier
// K tile 0, peeled: its first wgmma overwrites undefined accumulators
// (scale-d 0), so no move initialises them.
// CHECK: %[[UNDEF:.*]] = llvm.mlir.undef : !llvm.struct<(f32, f32,
// CHECK: nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %[[UNDEF]], <m = 64, n = 128, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-COUNT-2: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// CHECK: %[[FIRST:.*]] = nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK: scf.for {{.*}} iter_args(%[[ACC:.*]] = %[[FIRST]])
// CHECK: nvgpu.mbarrier.try_wait.parity %[[FULL]]
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: %[[M0:.*]] = nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %[[ACC]], <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK: %[[M1:.*]] = nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %[[M0]], <m = 64, n = 128, k = 16>
// CHECK: %[[M2:.*]] = nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %[[M1]], <m = 64, n = 128, k = 16>
// CHECK: %[[M3:.*]] = nvvm.wgmma.mma_async %{{.*}}, %{{.*}}, %[[M2]], <m = 64, n = 128, k = 16>
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT: nvvm.cp.async.wait.group 1
// CHECK-NEXT: nvvm.fence.proxy
// CHECK-NEXT: gpu.barrier
// CHECK: nvgpu.tma.async.load %[[DESC]]
// CHECK: nvgpu.device_async_copy
// CHECK: scf.yield %[[M3]]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// The consumers (one warpgroup) are done with the ring before a pair goes
// to its first 64 rows x 72 columns (16 bytes of padding a row).
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: %[[STAGING:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<0xi8, 3> to memref<64x72xbf16, 3>
// Gate register j pairs with up register j + 32.
// CHECK: llvm.extractvalue %{{.*}}[0]
// CHECK: llvm.extractvalue %{{.*}}[32]
// CHECK: math.exp %{{.*}} fastmath<afn> : f32
// CHECK: arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// CHECK: vector.store %{{.*}}, %[[STAGING]][%{{.*}}, %{{.*}}] {alignment = 4 : i64} : memref<64x72xbf16, 3>, vector<2xbf16>
// CHECK-NOT: vector.store %{{.*}}, %[[OUT]]
// Then thread t stores chunk t % 8 of row t / 8: the block's 16 rows x 8
// chunks in one pass of its 128 threads.
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: %[[CHUNK_INDEX:.*]] = arith.addi %{{.*}}, %c0
// CHECK: %[[ROW:.*]] = arith.divui %[[CHUNK_INDEX]], %c8
// CHECK: %[[CHUNK:.*]] = vector.load %[[STAGING]][%[[ROW]], %{{.*}}] {alignment = 16 : i64} : memref<64x72xbf16, 3>, vector<8xbf16>
// CHECK: vector.store %[[CHUNK]], %[[OUT]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<316x64xbf16>, vector<8xbf16>
// CHECK-NOT: vector.load
// CHECK: gpu.return

// An explicit config: block_n 64, 3 stages, sorted rows by TMA, weighted
// and scattered to slot order.
// CHECK: gpu.func @moe_grouped_matmul_wgmma_1(%[[ROWS:.*]]: !llvm.ptr, %[[MAP2:.*]]: !llvm.ptr,
// CHECK-SAME: %[[RW:[a-z0-9]+]]: memref<128x2xf32>, %[[OUT2:[a-z0-9]+]]: memref<128x2x96xf16>, %{{.*}}: i32)
// CHECK-SAME: moe.grid_constant_args = array<i64: 0, 1>, moe.launch = #moe.launch<grid = ["cdiv(T*2+min(T*2,4)*15,16)*2", "1", "1"], block = [128, 1, 1], smem = 49152, args = [map "arg5_map", map "arg6_map", "arg2", "arg3", "arg4", "arg7", "result1", i32 "T"], dependent = true>
// CHECK: %[[WDESC:.*]] = builtin.unrealized_conversion_cast %[[MAP2]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<1x64x64xf16, 3>, swizzle = swizzle_128b
// CHECK: %[[RDESC:.*]] = builtin.unrealized_conversion_cast %[[ROWS]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<64x64xf16, 3>, swizzle = swizzle_128b
// CHECK: nvgpu.mbarrier.create -> <memorySpace = 3 : i64, num_barriers = 3>
// CHECK: nvgpu.tma.prefetch.descriptor %[[WDESC]]
// CHECK: nvgpu.tma.prefetch.descriptor %[[RDESC]]
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}, %c16384
// CHECK: nvgpu.tma.async.load %[[WDESC]]
// CHECK: nvgpu.tma.async.load %[[RDESC]][%{{.*}}, %[[FIRST_ROW:.*]]], %{{.*}} to %{{.*}} : {{.*}} -> memref<64x64xf16, 3>
// CHECK-NOT: nvvm.cp.async
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>, D[<f32>, <one>], A[<f16>, <one>, <row>], B[<f16>, <one>, <col>]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT: gpu.barrier
// CHECK: %[[STAGING2:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<0xi8, 3> to memref<64x72xf16, 3>
// CHECK: %[[WEIGHT:.*]] = memref.load %[[RW]][%{{.*}}, %{{.*}}] : memref<128x2xf32>
// CHECK: arith.mulf %{{.*}}, %[[WEIGHT]]
// CHECK: vector.store %{{.*}}, %[[STAGING2]][%{{.*}}, %{{.*}}] {alignment = 4 : i64} : memref<64x72xf16, 3>, vector<2xf16>
// A chunk goes to its row's slot, and only where its columns are the
// output's (the second column tile has 32 of 64).
// CHECK: nvvm.barrier id
// CHECK: %[[TILE_COLUMN:.*]] = arith.muli %{{.*}}, %c8
// CHECK: %[[COLUMN:.*]] = arith.addi %{{.*}}, %[[TILE_COLUMN]] : index
// CHECK: %[[SLOT_ID:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<316xi32>
// CHECK: %[[SLOT2:.*]] = arith.index_cast %[[SLOT_ID]] : i32 to index
// CHECK: %[[TOKEN2:.*]] = arith.divui %[[SLOT2]], %c2
// CHECK: %[[IN_TOKEN:.*]] = arith.remui %[[SLOT2]], %c2
// CHECK: %[[IN_COLUMNS:.*]] = arith.cmpi ult, %[[COLUMN]], %c96
// CHECK: arith.andi %{{.*}}, %[[IN_COLUMNS]]
// CHECK: %[[CHUNK2:.*]] = vector.load %[[STAGING2]]
// CHECK: vector.store %[[CHUNK2]], %[[OUT2]][%[[TOKEN2]], %[[IN_TOKEN]], %[[COLUMN]]] {alignment = 16 : i64} : memref<128x2x96xf16>, vector<8xf16>
func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x128x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x64xf16>, %w2: tensor<4x96x64xf16>, %rw: tensor<?x2xf32>)
    -> (tensor<?x64xbf16>, tensor<?x2x96xf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot)
      {block_m = 16, num_slots = 2, config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 3, tma_a = true>}
    : (tensor<?x64xf16>, tensor<4x96x64xf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x96xf16>
  return %up, %down : tensor<?x64xbf16>, tensor<?x2x96xf16>
}
