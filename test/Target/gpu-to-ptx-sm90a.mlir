// moe-opt lowers a gpu.module through gpu-lower-to-nvvm-pipeline and
// gpu-module-to-binary to sm_90a PTX (and, where ptxas is installed, to a
// cubin): the kernel entry, the bare-pointer argument ABI the runtime relies
// on, the warp shuffles of a reduction and the global store.
// RUN: moe-opt %s --gpu-lower-to-nvvm-pipeline="cubin-chip=sm_90a cubin-features=+ptx80 cubin-format=isa kernel-bare-ptr-calling-convention=true" \
// RUN:   | FileCheck %s
// RUN: %if ptxas %{ moe-opt %s --gpu-lower-to-nvvm-pipeline="cubin-chip=sm_90a cubin-features=+ptx80 cubin-format=bin kernel-bare-ptr-calling-convention=true" \
// RUN:   | FileCheck %s --check-prefix=CUBIN %}

// CHECK: gpu.binary @kernels
// CHECK-SAME: #nvvm.target<chip = "sm_90a", features = "+ptx80">
// CHECK-SAME: assembly = "
// CHECK-SAME: .version 8.0
// CHECK-SAME: .target sm_90a
// CHECK-SAME: .visible .entry row_max(
// CHECK-SAME: .param .u64 .ptr .align 1 row_max_param_0,
// CHECK-SAME: .param .u64 .ptr .align 1 row_max_param_1
// CHECK-SAME: ld.global.b32
// CHECK-SAME: shfl.sync.bfly.b32
// CHECK-SAME: max.NaN.f32
// CHECK-SAME: st.global.b32

// CUBIN: gpu.binary @kernels
// CUBIN-SAME: #nvvm.target<chip = "sm_90a", features = "+ptx80">
// CUBIN-SAME: bin = "\7FELF
// CUBIN-SAME: row_max
module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    // One warp per row of 32 logits stores the row's maximum, the first step
    // of a softmax router.
    gpu.func @row_max(%logits: memref<8x32xf32>, %out: memref<8xf32>) kernel {
      %row = gpu.block_id x
      %lane = gpu.thread_id x
      %v = memref.load %logits[%row, %lane] : memref<8x32xf32>
      %m = gpu.all_reduce maximumf %v uniform {} : (f32) -> f32
      %c0 = arith.constant 0 : index
      %first = arith.cmpi eq, %lane, %c0 : index
      scf.if %first {
        memref.store %m, %out[%row] : memref<8xf32>
      }
      gpu.return
    }
  }
}
