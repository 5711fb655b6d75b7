// convert-moe-to-gpu lowers a moe.grouped_matmul that the tensor-core kernel
// cannot take (f32, or rows that are not 16-byte multiples) to a
// shared-memory tiled SIMT kernel: one block per block_m rows of one expert x 64 columns, blocks past
// the padded count or of no expert idle, A rows gathered by slot / S with
// padding rows zero, K in steps of 16 between barriers, fp32 multiply-add
// per element, and the epilogue (SiLU-and-mul, routed weight) on the
// accumulators before a scattered or sorted store. Weight tiles (gate and up)
// come by TMA through one 3-D descriptor over [E, N, K], passed by value,
// into views of the 1024-aligned dynamic shared memory, one mbarrier counting
// their bytes per K step; sorted (contiguous) input rows come by TMA through
// a 2-D descriptor over [C, K], padding rows masked to zero after the load;
// rows that are not 16-byte multiples are loaded by the threads instead.
// RUN: moe-opt %s --convert-moe-to-gpu="tokens-max=256" | FileCheck %s

// CHECK: gpu.module @moe_kernels
// CHECK-SAME: moe.tensormaps = [{box = array<i64: 16, 64, 1>, dims = ["32", "48", "4"], name = "weight_map", strides = ["128", "6144"], swizzle = 0 : i64, tensor = "arg1", type = f32}, {box = array<i64: 16, 64, 1>, dims = ["24", "32", "4"], name = "weight_map_1", strides = ["96", "3072"], swizzle = 0 : i64, tensor = "arg6", type = f32}, {box = array<i64: 16, 16>, dims = ["24", "T*2+60"], name = "input_map", strides = ["96"], swizzle = 0 : i64, tensor = "arg5", type = f32}]
// CHECK: memref.global "public" @moe_dynamic_shared_memory : memref<0xi8, 3> {alignment = 1024 : i64}

// CHECK: gpu.func @moe_grouped_matmul_0(%{{.*}}: memref<256x32xf32>, %[[MAP:.*]]: !llvm.ptr, %{{.*}}: memref<572xi32>, %{{.*}}: memref<36xi32>, %{{.*}}: memref<i32>, %[[OUT:.*]]: memref<572x24xf32>, %{{.*}}: i32)
// CHECK-SAME: workgroup(%[[A:.*]] : memref<16x17xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[B:.*]] : memref<64x17xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[UP:.*]] : memref<64x17xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: moe.launch = {args = ["arg0", "map:weight_map", "arg2", "arg3", "arg4", "result0", "i32:T"], block = array<i64: 256, 1, 1>, grid = ["1", "cdiv(T*2+60,16)", "1"], smem = "8192"}, moe.tensor_maps = array<i64: 1>
// CHECK: %[[SMEM:.*]] = memref.get_global @moe_dynamic_shared_memory
// CHECK: %[[GATE_TILE:.*]] = memref.view %[[SMEM]][%c0][]
// CHECK: %[[UP_TILE:.*]] = memref.view %[[SMEM]][%c4096][]
// CHECK: %[[DESC:.*]] = builtin.unrealized_conversion_cast %[[MAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<1x64x16xf32, 3>, swizzle = none, l2promo = none, oob = zero, interleave = none>
// CHECK: gpu.block_id y
// CHECK: scf.if
// CHECK: %[[BAR:.*]] = nvgpu.mbarrier.create
// CHECK: nvgpu.tma.prefetch.descriptor %[[DESC]]
// CHECK: nvgpu.mbarrier.init %[[BAR]]
// CHECK: gpu.barrier
// CHECK: scf.for %[[K0:.*]] = {{.*}} step %c16
// CHECK: nvgpu.mbarrier.arrive.expect_tx %[[BAR]][%{{.*}}], %c8192
// CHECK: nvgpu.tma.async.load %[[DESC]][%[[K0]], %{{.*}}, %[[EXPERT:.*]]], %[[BAR]][%{{.*}}] to %[[GATE_TILE]]
// CHECK: nvgpu.tma.async.load %[[DESC]][%[[K0]], %{{.*}}, %[[EXPERT]]], %[[BAR]][%{{.*}}] to %[[UP_TILE]]
// CHECK: memref.store %{{.*}}, %[[A]]
// CHECK: nvgpu.mbarrier.try_wait.parity %[[BAR]]
// CHECK: memref.load %[[GATE_TILE]]
// CHECK: memref.store %{{.*}}, %[[B]]
// CHECK: memref.load %[[UP_TILE]]
// CHECK: memref.store %{{.*}}, %[[UP]]
// CHECK: gpu.barrier
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: gpu.barrier
// CHECK: math.exp
// CHECK: memref.store %{{.*}}, %[[OUT]]

// CHECK: gpu.func @moe_grouped_matmul_1(%[[ROWS:.*]]: !llvm.ptr, %[[MAP2:.*]]: !llvm.ptr,
// CHECK-SAME: %[[OUT2:[a-z0-9]+]]: memref<256x2x32xf32>, %{{.*}}: i32)
// CHECK-SAME: moe.launch = {args = ["map:input_map", "map:weight_map_1", "arg2", "arg3", "arg4", "arg7", "result1", "i32:T"], block = array<i64: 256, 1, 1>, grid = ["1", "cdiv(T*2+60,16)", "1"], smem = "5120"}, moe.tensor_maps = array<i64: 0, 1>
// CHECK: %[[WTILE:.*]] = memref.view %{{.*}}[%c0][] : memref<0xi8, 3> to memref<1x64x16xf32, 3>
// CHECK: %[[WDESC:.*]] = builtin.unrealized_conversion_cast %[[MAP2]]
// CHECK: %[[RTILE:.*]] = memref.view %{{.*}}[%c4096][] : memref<0xi8, 3> to memref<16x16xf32, 3>
// CHECK: %[[RDESC:.*]] = builtin.unrealized_conversion_cast %[[ROWS]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<16x16xf32, 3>
// CHECK: scf.for %[[K1:.*]] = {{.*}} step %c16
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}, %c5120
// CHECK: nvgpu.tma.async.load %[[WDESC]][%[[K1]], %{{.*}}, %{{.*}}], %{{.*}} to %[[WTILE]]
// CHECK: nvgpu.tma.async.load %[[RDESC]][%[[K1]], %[[FIRST_ROW:.*]]], %{{.*}} to %[[RTILE]]
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK: memref.load %[[RTILE]]
// CHECK: arith.select
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: %[[WEIGHT:[0-9a-z_]+]] = memref.load %{{.*}}[%[[TOKEN:[0-9a-z_]+]], %[[SLOT:[0-9a-z_]+]]] : memref<256x2xf32>
// CHECK: %[[SCALED:[0-9a-z_]+]] = arith.mulf %{{.*}}, %[[WEIGHT]]
// CHECK: memref.store %[[SCALED]], %[[OUT2]][%[[TOKEN]], %[[SLOT]], %{{.*}}]

// Rows of 12 f16 (24 bytes) cannot be TMA boxes: the threads load them.
// CHECK: gpu.func @moe_grouped_matmul_2(%{{.*}}: memref<572x12xf16>, %[[W:.*]]: memref<4x16x12xf16>,
// CHECK-SAME: moe.launch = {args = ["arg8", "arg9", "arg2", "arg3", "arg4", "result2", "i32:T"], block = array<i64: 256, 1, 1>, grid = ["1", "cdiv(T*2+60,16)", "1"], smem = "0"}}
// CHECK-NOT: nvgpu.
// CHECK: memref.load %[[W]]
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
