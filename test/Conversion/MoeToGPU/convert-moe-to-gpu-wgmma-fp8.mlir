// convert-moe-to-gpu on fp8 experts with 128x128 block scales (after
// moe-decompose, moe-tile, moe-split-k, moe-tma at T=1000): the first GEMM
// takes the quantized token rows and their scales, runs four k32 e4m3
// wgmmas per 128-byte K tile from zero (scale-d zero), waits for them, and
// promotes them into the sums times (row scale x weight-box scale) of the
// K block, those scales loaded one K tile ahead; the first K tile only
// multiplies, later ones fuse the multiply-add (one fma per accumulator).
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=1000 \
// RUN:   --moe-tile=tokens=1000 --moe-split-k=tokens=1000 --moe-tma \
// RUN:   --convert-moe-to-gpu=tokens-max=1024 2>/dev/null | FileCheck %s
// The stage of a K tile is free once its wgmmas are waited for, before the
// promotion: the plain loop refills the ring there, and with a producer
// warpgroup (SPECIALIZED) each consumer warp's lane 0 frees the stage of the
// K tile it just multiplied, not the previous one's.
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=1000 \
// RUN:   --moe-tile="tokens=1000 config-db=%S/../../GPU/Inputs/fp8-block-ws-configs.json" \
// RUN:   --moe-split-k=tokens=1000 --moe-tma --convert-moe-to-gpu=tokens-max=1024 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=SPECIALIZED

// SPECIALIZED-LABEL: gpu.func @moe_grouped_matmul_wgmma_
// SPECIALIZED: nvgpu.mbarrier.create
// SPECIALIZED: %[[EMPTY:.*]] = nvgpu.mbarrier.create
// SPECIALIZED: scf.for %[[STEP:arg[0-9]+]] = %c1{{(_[0-9]+)?}} to %{{.*}} iter_args(
// SPECIALIZED-NOT: nvvm.wgmma.wait.group.sync.aligned 1
// SPECIALIZED: nvvm.wgmma.wait.group.sync.aligned 0
// SPECIALIZED-NOT: math.fma
// SPECIALIZED: %[[COUNT:.*]] = arith.addi %{{.*}}, %[[STEP]] : index
// SPECIALIZED-NEXT: arith.constant 4 : index
// SPECIALIZED-NEXT: %[[STAGE:.*]] = arith.remui %[[COUNT]]
// SPECIALIZED: scf.if
// SPECIALIZED-NEXT: nvgpu.mbarrier.arrive %[[EMPTY]][%[[STAGE]]]
// SPECIALIZED: math.fma

// CHECK: gpu.func @moe_quantize_{{[0-9]+}}(%{{.*}}: memref<1024x384xbf16>, %{{.*}}: memref<1024x384xf8E4M3FN>, %{{.*}}: memref<1024x3xf32>
// CHECK: gpu.func @moe_grouped_matmul_wgmma_{{[0-9]+}}(%{{.*}}: memref<1024x384xf8E4M3FN>, %{{.*}}: !llvm.ptr, %{{.*}}: memref<5104xi32>, %{{.*}}: memref<80xi32>, %{{.*}}: memref<i32>, %[[XS:.*]]: memref<1024x3xf32>, %[[WS:.*]]: memref<16x3x3xf32>, %{{.*}}: memref<5104x192xf8E4M3FN>, %{{.*}}: memref<5104x2xf32>
// CHECK-SAME: args = ["quantized", map "arg3_map", "route_sorted_ids", "route_expert_ids", "route_num_padded", "quantize_scales", "arg5", "quantized_1", "quantize_scales_1", i32 "T"]
// (Its epilogue quantizes: convert-moe-to-gpu-fused-quantize.mlir.)
// K tile 0's scales load before its wgmmas (K block min(first + 0, 2)).
// CHECK: %[[KB0:.*]] = arith.minui %{{.*}}, %c2{{.*}} : index
// CHECK: %[[ROW0:.*]] = memref.load %[[XS]][%{{.*}}, %[[KB0]]] : memref<1024x3xf32>
// CHECK: memref.load %[[XS]][%{{.*}}, %[[KB0]]] : memref<1024x3xf32>
// CHECK: %[[GATE:.*]] = memref.load %[[WS]][%{{.*}}, %{{.*}}, %[[KB0]]] : memref<16x3x3xf32>
// The first K tile.
// CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>, <one>, <row>], B[<e4m3>, <one>, <col>]
// CHECK-COUNT-3: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 32>, D[<f32>, <one>], A[<e4m3>
// While they run, K tile 1's scales load (one K tile ahead).
// CHECK: %[[KB1:.*]] = arith.minui %{{.*}}, %c2{{.*}} : index
// CHECK: %[[NEXTROW0:.*]] = memref.load %[[XS]][%{{.*}}, %[[KB1]]] : memref<1024x3xf32>
// CHECK: %[[NEXTROW1:.*]] = memref.load %[[XS]][%{{.*}}, %[[KB1]]] : memref<1024x3xf32>
// CHECK: %[[NEXTGATE:.*]] = memref.load %[[WS]][%{{.*}}, %{{.*}}, %[[KB1]]] : memref<16x3x3xf32>
// CHECK: %[[NEXTUP:.*]] = memref.load %[[WS]][%{{.*}}, %{{.*}}, %[[KB1]]] : memref<16x3x3xf32>
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// The stage is read: the ring refills before the promotion.
// CHECK: gpu.barrier
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: %[[SCALE:.*]] = arith.mulf %[[ROW0]], %[[GATE]] : f32
// CHECK-NEXT: %[[FIRST:.*]] = llvm.extractvalue %[[PARTIAL:.*]][0]
// CHECK-NEXT: arith.mulf %[[FIRST]], %[[SCALE]] : f32
// A later K tile, in the loop that carries the sums and the next K tile's
// scales: partials from zero, promoted with the carried scales while the
// following K tile's load.
// CHECK: scf.for {{.*}} iter_args(%[[SUMS:.*]] = %{{.*}}, %[[R0:.*]] = %[[NEXTROW0]], %{{.*}} = %[[NEXTROW1]], %[[G:.*]] = %[[NEXTGATE]], %{{.*}} = %[[NEXTUP]])
// CHECK: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>], A[<e4m3>
// CHECK: memref.load %[[XS]]
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: %[[SCALE2:.*]] = arith.mulf %[[R0]], %[[G]] : f32
// CHECK-NEXT: %[[P:.*]] = llvm.extractvalue %{{.*}}[0]
// CHECK-NEXT: %[[S:.*]] = llvm.extractvalue %[[SUMS]][0]
// CHECK-NEXT: math.fma %[[P]], %[[SCALE2]], %[[S]] : f32
