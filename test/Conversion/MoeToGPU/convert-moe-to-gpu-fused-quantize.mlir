// convert-moe-to-gpu fuses the moe.quantize between an fp8 layer's GEMMs
// into the first GEMM's epilogue: no quantize kernel between them, the
// first GEMM writes the e4m3 rows and their scales. With 128-column groups
// and 64 output columns per block (block_n = 128, gated), a block's tile is
// two column tiles run in a loop that carries the first's values (rounded
// to bf16, as the unfused epilogue stores them); the last takes each row's
// amax over the four lanes that hold it (shuffles xor 1, 2), divides by the
// floored scale and stores e4m3 pairs. A static scale needs no amax; a
// split-K GEMM keeps the quantize kernel, and so does a decode variant
// (T x S at most the experts: the first GEMM keeps all its blocks).
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=1000 \
// RUN:   --moe-tile=tokens=1000 --moe-split-k=tokens=1000 --moe-tma \
// RUN:   --convert-moe-to-gpu=tokens-max=1024 2>/dev/null | FileCheck %s --check-prefix=GROUP
// RUN: moe-opt %S/../../GPU/Inputs/fp8-static-experts.mlir --moe-decompose=tokens=1000 \
// RUN:   --moe-tile=tokens=1000 --moe-split-k=tokens=1000 --moe-tma \
// RUN:   --convert-moe-to-gpu=tokens-max=1024 2>/dev/null | FileCheck %s --check-prefix=STATIC
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=7 \
// RUN:   "--moe-tile=tokens=7 config-db=%S/../../GPU/Inputs/fp8-block-splitk-configs.json" \
// RUN:   --moe-split-k=tokens=7 --moe-tma --convert-moe-to-gpu=tokens-max=1024 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=SPLITK
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=4 \
// RUN:   --moe-tile=tokens=4 --moe-split-k=tokens=4 --moe-tma \
// RUN:   --convert-moe-to-gpu="tokens-max=1024 tokens=4" 2>/dev/null | FileCheck %s --check-prefix=DECODE
// RUN: moe-opt %S/../../GPU/Inputs/fp8-block-experts.mlir --moe-decompose=tokens=5 \
// RUN:   --moe-tile=tokens=5 --moe-split-k=tokens=5 --moe-tma \
// RUN:   --convert-moe-to-gpu="tokens-max=1024 tokens=5" 2>/dev/null | FileCheck %s --check-prefix=GROUP

// The hidden states' quantize kernel, then the first GEMM writing e4m3 rows
// [C, I] and scales [C, ceil(I / 128)] in place of its bf16 output; a grid
// of two block columns for three column tiles.
// GROUP: gpu.func @moe_quantize_{{[0-9]+}}(
// GROUP: gpu.func @moe_grouped_matmul_wgmma_{{[0-9]+}}({{.*}}, %[[CODES:.*]]: memref<5104x192xf8E4M3FN>, %[[SCALES:.*]]: memref<5104x2xf32>, %{{.*}}: i32)
// GROUP-SAME: grid = ["cdiv(T*4+min(T*4,16)*63,64)*2", "1", "1"]
// GROUP-SAME: args = ["quantized", map "arg3_map", "route_sorted_ids", "route_expert_ids", "route_num_padded", "quantize_scales", "arg5", "quantized_1", "quantize_scales_1", i32 "T"]
// GROUP: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<2xbf16>
// GROUP: scf.for %[[COLUMN_TILE:.*]] = %{{.*}} to %c2{{.*}} step %{{.*}} iter_args(%[[HELD:[^ ]*]] = %[[ZERO]], {{.*}}) -> (vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>, vector<2xbf16>)
// The second column tile refills the ring after a block barrier.
// GROUP: %[[LATER:.*]] = arith.cmpi ne, %{{.*}}, %{{.*}} : index
// GROUP-NEXT: scf.if %[[LATER]] {
// GROUP-NEXT: gpu.barrier
// GROUP: nvvm.wgmma.mma_async
// GROUP: arith.truncf %{{.*}} : vector<2xf32> to vector<2xbf16>
// GROUP: %[[LAST:.*]] = arith.cmpi eq, %[[COLUMN_TILE]], %c1{{.*}} : index
// GROUP-NEXT: scf.if %[[LAST]] {
// The row's amax: the first column tile's values first, columns past
// I = 192 (the ragged last group) left out.
// GROUP: %[[FIRST:.*]] = arith.extf %[[HELD]] : vector<2xbf16> to vector<2xf32>
// GROUP-NEXT: math.absf %[[FIRST]] : vector<2xf32>
// GROUP: %[[INSIDE:.*]] = arith.cmpi ult, %{{.*}}, %c192{{.*}} : index
// GROUP: arith.select %[[INSIDE]]
// GROUP: arith.maximumf
// GROUP: gpu.shuffle  xor %{{.*}}, %c1_i32
// GROUP: gpu.shuffle  xor %{{.*}}, %c2_i32
// GROUP: %[[FLOORED:.*]] = arith.maximumf %{{.*}}, %cst{{.*}} : f32
// GROUP: %[[SCALE:.*]] = arith.divf %[[FLOORED]], %cst{{.*}} : f32
// GROUP: memref.store %[[SCALE]], %[[SCALES]][%{{.*}}, %{{.*}}] : memref<5104x2xf32>
// GROUP: %[[VALUES:.*]] = arith.extf %[[HELD]] : vector<2xbf16> to vector<2xf32>
// GROUP: %[[ODD:.*]] = vector.extract %[[VALUES]][1]
// GROUP-NEXT: %[[ODD_SCALED:.*]] = arith.divf %[[ODD]], %[[SCALE]] : f32
// GROUP-NEXT: %[[EVEN:.*]] = vector.extract %[[VALUES]][0]
// GROUP-NEXT: %[[EVEN_SCALED:.*]] = arith.divf %[[EVEN]], %[[SCALE]] : f32
// GROUP-NEXT: %[[BYTES:.*]] = nvvm.convert.f32x2.to.f8x2 %[[ODD_SCALED]], %[[EVEN_SCALED]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : vector<2xi8>(f8E4M3FN)
// GROUP-NEXT: %[[PAIR:.*]] = arith.bitcast %[[BYTES]] : vector<2xi8> to vector<2xf8E4M3FN>
// GROUP: vector.store %[[PAIR]], %[[CODES]][%{{.*}}, %{{.*}}] {alignment = 2 : i64} : memref<5104x192xf8E4M3FN>, vector<2xf8E4M3FN>
// No quantize kernel before the second GEMM, which reads the fused rows.
// GROUP-NOT: gpu.func @moe_quantize
// GROUP: gpu.func @moe_grouped_matmul_wgmma_{{[0-9]+}}(
// GROUP-SAME: args = [map "quantized_1_map", map "arg4_map", "route_sorted_ids", "route_expert_ids", "route_num_padded", "quantize_scales_1",

// A static scale (the function's argument 8), read once, every block's
// 64 columns divided by it, stored as the rows' scale by the blocks of the
// first columns.
// STATIC: gpu.func @moe_quantize_3(
// STATIC: gpu.func @moe_grouped_matmul_wgmma_4({{.*}}, %[[CODES:.*]]: memref<2552x128xf8E4M3FN>, %[[SCALES:.*]]: memref<2552x1xf32>, %[[STATIC:.*]]: memref<1xf32>, %{{.*}}: i32)
// STATIC-SAME: args = ["quantized", map "arg3_map", "route_sorted_ids", "route_expert_ids", "route_num_padded", "quantize_scales", "arg5", "quantized_1", "quantize_scales_1", "arg8", i32 "T"]
// STATIC: %[[SCALE:.*]] = memref.load %[[STATIC]][%c0{{.*}}] : memref<1xf32>
// STATIC-NOT: gpu.shuffle
// STATIC: memref.store %[[SCALE]], %[[SCALES]][%{{.*}}, %{{.*}}] : memref<2552x1xf32>
// STATIC: arith.divf %{{.*}}, %[[SCALE]] : f32
// STATIC: nvvm.convert.f32x2.to.f8x2
// STATIC: vector.store %{{.*}}, %[[CODES]]
// STATIC-NOT: gpu.func @moe_quantize
// STATIC: gpu.func @moe_grouped_matmul_wgmma_5(

// Split K: the reduction kernel writes the bf16 rows and a quantize kernel
// reads them.
// SPLITK: gpu.func @moe_quantize_3(
// SPLITK: gpu.func @moe_grouped_matmul_wgmma_4(
// SPLITK: gpu.func @moe_grouped_matmul_reduce_5({{.*}}: memref<5104x192xbf16>
// SPLITK: gpu.func @moe_quantize_6(%{{.*}}: memref<5104x192xbf16>, %{{.*}}: memref<i32>, %{{.*}}: memref<5104x192xf8E4M3FN>, %{{.*}}: memref<5104x2xf32>
// SPLITK: gpu.func @moe_grouped_matmul_wgmma_7(

// Decode: 4 tokens x 4 slots stream the 16 experts' weights; the first GEMM
// stores bf16 rows and a quantize kernel reads them (at 5 tokens it fuses).
// DECODE: gpu.func @moe_quantize_1(
// DECODE: gpu.func @moe_grouped_matmul_wgmma_2({{.*}}: memref<5104x192xbf16>
// DECODE: gpu.func @moe_quantize_3(%{{.*}}: memref<5104x192xbf16>, %{{.*}}: memref<i32>, %{{.*}}: memref<5104x192xf8E4M3FN>, %{{.*}}: memref<5104x2xf32>
// DECODE: gpu.func @moe_grouped_matmul_wgmma_4(
