// convert-moe-to-gpu lowers moe.grouped_matmul to a shared-memory tiled SIMT
// kernel: one block per block_m rows of one expert x 64 columns, blocks past
// the padded count or of no expert idle, A rows gathered by slot / S with
// padding rows zero, K in steps of 16 between barriers, fp32 multiply-add
// per element, and the epilogue (SiLU-and-mul, routed weight) on the
// accumulators before a scattered or sorted store.
// RUN: moe-opt %s --convert-moe-to-gpu="tokens-max=256" | FileCheck %s

// CHECK: gpu.func @moe_grouped_matmul_0(%{{.*}}: memref<256x32xbf16>, %{{.*}}: memref<4x48x32xbf16>, %{{.*}}: memref<572xi32>, %{{.*}}: memref<36xi32>, %{{.*}}: memref<i32>, %[[OUT:.*]]: memref<572x24xbf16>, %{{.*}}: i32)
// CHECK-SAME: workgroup(%[[A:.*]] : memref<16x17xf32, #gpu.address_space<workgroup>>, %[[B:.*]] : memref<64x17xf32, #gpu.address_space<workgroup>>, %[[UP:.*]] : memref<64x17xf32, #gpu.address_space<workgroup>>)
// CHECK-SAME: moe.launch = {args = ["arg0", "arg1", "arg2", "arg3", "arg4", "result0", "i32:T"], block = array<i64: 256, 1, 1>, grid = ["1", "cdiv(T*2+60,16)", "1"]
// CHECK: gpu.block_id y
// CHECK: scf.if
// CHECK: scf.for {{.*}} step %c16
// CHECK: memref.store %{{.*}}, %[[A]]
// CHECK: memref.store %{{.*}}, %[[B]]
// CHECK: memref.store %{{.*}}, %[[UP]]
// CHECK: gpu.barrier
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: gpu.barrier
// CHECK: math.exp
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}}, %[[OUT]]

// CHECK: gpu.func @moe_grouped_matmul_1(
// CHECK-SAME: %[[OUT2:[a-z0-9]+]]: memref<256x2x32xf32>, %{{.*}}: i32)
// CHECK-SAME: grid = ["1", "cdiv(T*2+60,16)", "1"]
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: %[[WEIGHT:[0-9a-z_]+]] = memref.load %{{.*}}[%[[TOKEN:[0-9a-z_]+]], %[[SLOT:[0-9a-z_]+]]] : memref<256x2xf32>
// CHECK: %[[SCALED:[0-9a-z_]+]] = arith.mulf %{{.*}}, %[[WEIGHT]]
// CHECK: memref.store %[[SCALED]], %[[OUT2]][%[[TOKEN]], %[[SLOT]], %{{.*}}]
func.func @gemms(%x: tensor<?x32xbf16>, %w13: tensor<4x48x32xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %h: tensor<?x24xf32>, %w2: tensor<4x32x24xf32>, %rw: tensor<?x2xf32>)
    -> (tensor<?x24xbf16>, tensor<?x2x32xf32>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<?x32xbf16>, tensor<4x48x32xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x24xbf16>
  %down = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) {block_m = 16, num_slots = 2}
    : (tensor<?x24xf32>, tensor<4x32x24xf32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x32xf32>
  return %up, %down : tensor<?x24xbf16>, tensor<?x2x32xf32>
}
