// convert-moe-to-gpu on MXFP4 experts (after moe-decompose, moe-tile,
// moe-split-k, moe-tma at T=1000): warp-specialized kernels whose producer
// warpgroup has the packed weight boxes (i8, unswizzled, half of block_k)
// TMA'd onto `staged`, and each producer thread decodes its share of a
// stage two K tiles later (its e8m0 scales loaded the iteration before and
// carried in registers): bf16
// pairs of e2m1 bits times 2^126 times the scale, stored as 16 bytes in the
// 128-byte swizzle, fenced for the async proxy and reported on `full`. The
// consumers run plain bf16 wgmmas on the decoded tiles. With gathered rows
// only the producer threads arrive on `full` (128); with sorted rows the
// leader arrives too, with the row tile's TMA bytes (129).
// With two consumer warpgroups (128-row routing blocks) two producer
// warpgroups decode, which bounds the kernel: 512 threads, 256 of them
// reporting on `full`.
// RUN: moe-opt %S/../../GPU/Inputs/mxfp4-experts.mlir --moe-decompose=tokens=1000 \
// RUN:   --moe-tile=tokens=1000 --moe-split-k=tokens=1000 --moe-tma \
// RUN:   --convert-moe-to-gpu=tokens-max=1024 2>/dev/null | FileCheck %s
// RUN: moe-opt %S/../../GPU/Inputs/mxfp4-experts.mlir \
// RUN:   --moe-decompose="tokens=4096 block-m=0" --moe-tile=tokens=4096 \
// RUN:   --moe-split-k=tokens=4096 --moe-tma --convert-moe-to-gpu=tokens-max=4096 \
// RUN:   2>/dev/null | FileCheck %s --check-prefix=WG2
// At 16 tokens the experts average far less than two row blocks, where bf16
// rows load under an L2 evict_last policy; MXFP4 GEMMs keep nvgpu's loads
// (their decoding producers bound them, and the longer gathers cost).
// RUN: moe-opt %S/../../GPU/Inputs/mxfp4-experts.mlir --moe-decompose=tokens=16 \
// RUN:   --moe-tile=tokens=16 --moe-split-k=tokens=16 --moe-tma \
// RUN:   --convert-moe-to-gpu="tokens-max=1024 tokens=16" 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=NOPOLICY
// NOPOLICY: gpu.func @moe_grouped_matmul_wgmma
// NOPOLICY-NOT: createpolicy

// WG2: num_warpgroups = 2
// WG2: gpu.func @moe_grouped_matmul_wgmma_{{[0-9]+}}
// WG2-SAME: block = [512, 1, 1]
// WG2: nvgpu.mbarrier.init %{{.*}}[%{{.*}}], %c256

// The first GEMM: gathered bf16 rows, packed w13 through its map, e8m0 scales.
// CHECK: gpu.func @moe_grouped_matmul_wgmma_{{[0-9]+}}(%{{.*}}: memref<1024x256xbf16>, %{{.*}}: !llvm.ptr, %{{.*}}: memref<4600xi32>, %{{.*}}: memref<72xi32>, %{{.*}}: memref<i32>, %[[SCALES:.*]]: memref<8x384x8xf8E8M0FNU>, %{{.*}}: memref<4600x192xbf16>, %{{.*}}: i32)
// CHECK-SAME: block = [256, 1, 1], smem = 114688, args = ["arg0", map "arg3_map", "route_sorted_ids", "route_expert_ids", "route_num_padded", "arg5", "gemm_output", i32 "T"]
// full: the 128 producer threads; empty: the consumers; staged: the leader.
// CHECK: nvgpu.mbarrier.init %[[FULL:.*]][%{{.*}}], %c128
// CHECK-NEXT: arith.constant 0
// CHECK-NEXT: nvgpu.mbarrier.init %[[EMPTY:.*]][%{{.*}}], %c4
// CHECK-NEXT: arith.constant 1
// CHECK-NEXT: arith.constant 0
// CHECK-NEXT: nvgpu.mbarrier.init %[[STAGED:.*]][%{{.*}}], %c1
// The producer loop runs two K tiles (stages - 2) past the split's.
// CHECK: scf.for {{.*}} iter_args(
// CHECK: nvgpu.mbarrier.try_wait.parity %[[EMPTY]]
// No bytes on full: the leader's expect_tx is the packed tile's, on staged.
// CHECK-NOT: nvgpu.mbarrier.arrive.expect_tx %[[FULL]]
// CHECK: nvgpu.mbarrier.arrive.expect_tx %[[STAGED]][%{{.*}}], %c4096
// CHECK: nvgpu.tma.async.load %{{.*}}, %[[STAGED]][%{{.*}}] to %{{.*}} : <tensor = memref<1x64x32xi8, 3>, swizzle = none
// CHECK: nvgpu.tma.async.load %{{.*}}, %[[STAGED]][%{{.*}}] to %{{.*}} : <tensor = memref<1x64x32xi8, 3>, swizzle = none
// The gathers.
// CHECK: nvgpu.device_async_copy
// CHECK: nvvm.cp.async.commit.group
// Two K tiles later: the rows, the packed tile, its 8 words per thread
// loaded before any decoded store, the decode.
// CHECK: nvvm.cp.async.wait.group 2
// CHECK: nvgpu.mbarrier.try_wait.parity %[[STAGED]]
// CHECK: %[[POW126:.*]] = llvm.bitcast %c2122350208_i32 : i32 to vector<2xbf16>
// CHECK-COUNT-8: memref.load %{{.*}} : memref<1024xi32, 3>
// CHECK-NOT: vector.store
// CHECK: %[[SCALE:.*]] = llvm.bitcast %{{.*}} : i32 to vector<2xbf16>
// CHECK: %[[CODES:.*]] = llvm.bitcast %{{.*}} : i32 to vector<2xbf16>
// CHECK-NEXT: %[[VALUES:.*]] = arith.mulf %[[CODES]], %[[POW126]] : vector<2xbf16>
// CHECK-NEXT: arith.mulf %[[VALUES]], %[[SCALE]] : vector<2xbf16>
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<4096xi32, 3>, vector<4xi32>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: arith.constant 4
// CHECK-NEXT: arith.remui
// CHECK-NEXT: nvgpu.mbarrier.arrive %[[FULL]]
// Then the scales of the K tile the next iteration decodes, carried to it.
// CHECK: memref.load %[[SCALES]]
// CHECK: scf.yield
// The consumers: bf16 wgmmas on the decoded tiles.
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <zero>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]

// The second GEMM: sorted rows by TMA, the leader arriving with their bytes.
// CHECK: gpu.func @moe_grouped_matmul_wgmma_{{[0-9]+}}(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: memref<4600xi32>, %{{.*}}: memref<72xi32>, %{{.*}}: memref<i32>, %{{.*}}: memref<8x256x6xf8E8M0FNU>
// CHECK: nvgpu.mbarrier.init %[[FULL2:.*]][%{{.*}}], %c129
// CHECK: nvgpu.mbarrier.arrive.expect_tx %[[FULL2]][%{{.*}}], %c8192
// CHECK: nvgpu.tma.async.load {{.*}} : <tensor = memref<1x128x32xi8, 3>, swizzle = none
