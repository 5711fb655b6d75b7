// convert-moe-to-gpu lowers a moe.grouped_matmul that the tensor-core kernel
// cannot take (f32, or rows that are not 16-byte multiples; moe-tile leaves
// these untiled) to a shared-memory tiled SIMT kernel: one block per block_m
// rows of one expert x 64 columns, blocks past the padded count or of no
// expert idle, A rows gathered by slot / S (or read in sorted order) with
// padding rows zero, weight columns (gate and up) staged by the threads, K
// in steps of 16 between barriers, fp32 multiply-add per element, and the
// epilogue (SiLU-and-mul, routed weight) on the accumulators before a
// scattered or sorted store. No TMA: descriptors belong to the tensor-core
// kernel's configs (moe-tma).
// RUN: moe-opt %s --convert-moe-to-gpu="tokens-max=256" | FileCheck %s

// The plan ends with its buffers: no tensor maps.
// CHECK: gpu.module @moe_kernels
// CHECK-SAME: moe.launch_plan = #moe.launch_plan<tokens_max = 256, buffers = [
// CHECK-SAME: <output "result2" : f16 ["T*2+60", "16"]>]>}

// CHECK: gpu.func @moe_grouped_matmul_0(%[[X:.*]]: memref<256x32xf32>, %[[W:.*]]: memref<4x48x32xf32>, %{{.*}}: memref<572xi32>, %[[EXPERTS:.*]]: memref<36xi32>, %{{.*}}: memref<i32>, %[[OUT:.*]]: memref<572x24xf32>, %{{.*}}: i32)
// CHECK-SAME: workgroup(%[[A:.*]] : memref<16x17xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[B:.*]] : memref<64x17xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[UP:.*]] : memref<64x17xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "cdiv(T*2+min(T*2,4)*15,16)", "1"], block = [256, 1, 1], smem = 0, args = ["arg0", "arg1", "arg2", "arg3", "arg4", "result0", i32 "T"], dependent = true>}
// CHECK: %[[ROW_BLOCK:.*]] = gpu.block_id y
// CHECK: %[[EXPERT_I32:.*]] = memref.load %[[EXPERTS]][%[[ROW_BLOCK]]]
// CHECK: %[[EXPERT:.*]] = arith.index_cast %[[EXPERT_I32]]
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = {{.*}} step %c16
// CHECK: memref.load %[[X]]
// CHECK: memref.store %{{.*}}, %[[A]]
// CHECK: memref.load %[[W]][%[[EXPERT]], %{{.*}}, %{{.*}}]
// CHECK: memref.store %{{.*}}, %[[B]]
// CHECK: memref.load %[[W]][%[[EXPERT]], %{{.*}}, %{{.*}}]
// CHECK: memref.store %{{.*}}, %[[UP]]
// CHECK: gpu.barrier
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: gpu.barrier
// CHECK: math.exp
// CHECK: memref.store %{{.*}}, %[[OUT]]

// CHECK: gpu.func @moe_grouped_matmul_1(%[[ROWS:.*]]: memref<572x24xf32>, %{{.*}}: memref<4x32x24xf32>,
// CHECK-SAME: %[[OUT2:[a-z0-9]+]]: memref<256x2x32xf32>, %{{.*}}: i32)
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "cdiv(T*2+min(T*2,4)*15,16)", "1"], block = [256, 1, 1], smem = 0, args = ["arg5", "arg6", "arg2", "arg3", "arg4", "arg7", "result1", i32 "T"], dependent = true>}
// CHECK: scf.for
// CHECK: memref.load %[[ROWS]]
// CHECK: arith.select
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: %[[WEIGHT:[0-9a-z_]+]] = memref.load %{{.*}}[%[[TOKEN:[0-9a-z_]+]], %[[SLOT:[0-9a-z_]+]]] : memref<256x2xf32>
// CHECK: %[[SCALED:[0-9a-z_]+]] = arith.mulf %{{.*}}, %[[WEIGHT]]
// CHECK: memref.store %[[SCALED]], %[[OUT2]][%[[TOKEN]], %[[SLOT]], %{{.*}}]

// Rows of 12 f16 (24 bytes): no tensor-core kernel either.
// CHECK: gpu.func @moe_grouped_matmul_2(%{{.*}}: memref<572x12xf16>, %[[W3:.*]]: memref<4x16x12xf16>,
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "cdiv(T*2+min(T*2,4)*15,16)", "1"], block = [256, 1, 1], smem = 0, args = ["arg8", "arg9", "arg2", "arg3", "arg4", "result2", i32 "T"], dependent = true>}
// CHECK-NOT: nvgpu.
// CHECK: memref.load %[[W3]]
// CHECK-NOT: nvgpu.
// CHECK: gpu.return
func.func @gemms(%x: tensor<?x32xf32>, %w13: tensor<4x48x32xf32>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x24xf32>, %w2: tensor<4x32x24xf32>, %rw: tensor<?x2xf32>,
                 %g: tensor<?x12xf16>, %w3: tensor<4x16x12xf16>)
    -> (tensor<?x24xf32>, tensor<?x2x32xf32>, tensor<?x16xf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<?x32xf32>, tensor<4x48x32xf32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x24xf32>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) {block_m = 16, num_slots = 2}
    : (tensor<?x24xf32>, tensor<4x32x24xf32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x32xf32>
  %odd = moe.grouped_matmul %g, %w3, %s, %e, %n input(sorted) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<?x12xf16>, tensor<4x16x12xf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x16xf16>
  return %up, %down, %odd : tensor<?x24xf32>, tensor<?x2x32xf32>, tensor<?x16xf16>
}
