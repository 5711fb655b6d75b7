// Round-trip of the launch plan attributes of a kernel module and its
// kernels, before and after the kernels' lowering to LLVM functions: print,
// re-parse, print again. A dependent launch's kernel waits first (ops that
// touch no memory may come before the wait).
// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s

// CHECK-LABEL: gpu.module @kernels
// CHECK-SAME: moe.launch_plan = #moe.launch_plan<tokens_max = 1024, buffers = [<input "arg0" : bf16 ["T", "64"]>, <input "arg1" : bf16 ["4", "128", "64"]>, <output "result0" : f32 ["T", "128"]>, <workspace "gemm_partials" : f32 ["2", "cdiv(T*9,512)*(T+1)", "128"]>, <input "arg2" : i32 []>], zero_fill = ["gemm_partials"], tensor_maps = [<"arg1_map" over "arg1" box [1, 64, 64] swizzle 128>]>
// CHECK: gpu.func @gemm(%{{.*}}: memref<1024x64xbf16>, %{{.*}}: !llvm.ptr, %{{.*}}: memref<2x1024x128xf32>, %{{.*}}: i32) kernel
// CHECK-SAME: moe.grid_constant_args = array<i64: 1>
// CHECK-SAME: moe.launch = #moe.launch<grid = ["cdiv(T,64)", "2", "1"], block = [128, 1, 1], smem = 98304, args = ["arg0", map "arg1_map", "gemm_partials", i32 "T"], dependent = true>
// CHECK-NEXT: nvvm.griddepcontrol wait
// CHECK: gpu.func @reduce(%{{.*}}: i32) kernel
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [32, 32, 1], smem = 0, args = [i32 "max(min(T,4),(T-1)*2)"]>
module attributes {gpu.container_module} {
  gpu.module @kernels attributes {moe.launch_plan = #moe.launch_plan<
      tokens_max = 1024,
      buffers = [<input "arg0" : bf16 ["T", "64"]>,
                 <input "arg1" : bf16 ["4", "128", "64"]>,
                 <output "result0" : f32 ["T", "128"]>,
                 <workspace "gemm_partials" : f32 ["2", "cdiv(T*9,512)*(T+1)", "128"]>,
                 <input "arg2" : i32 []>],
      zero_fill = ["gemm_partials"],
      tensor_maps = [<"arg1_map" over "arg1" box [1, 64, 64] swizzle 128>]>} {
    gpu.func @gemm(%rows: memref<1024x64xbf16>, %weights: !llvm.ptr,
                   %partials: memref<2x1024x128xf32>, %tokens: i32) kernel
        attributes {known_block_size = array<i32: 128, 1, 1>,
                    moe.grid_constant_args = array<i64: 1>,
                    moe.launch = #moe.launch<grid = ["cdiv(T,64)", "2", "1"],
                                             block = [128, 1, 1], smem = 98304,
                                             args = ["arg0", map "arg1_map",
                                                     "gemm_partials", i32 "T"],
                                             dependent = true>} {
      nvvm.griddepcontrol wait
      gpu.return
    }
    gpu.func @reduce(%tokens: i32) kernel
        attributes {moe.launch = #moe.launch<grid = ["1", "1", "1"],
                                             block = [32, 32, 1], smem = 0,
                                             args = [i32 "max(min(T,4),(T-1)*2)"]>} {
      gpu.return
    }
  }
}

// A plan with no fills and no tensor maps leaves both lists out; a lowered
// kernel takes every buffer as a bare pointer.
// CHECK-LABEL: gpu.module @lowered
// CHECK-SAME: moe.launch_plan = #moe.launch_plan<tokens_max = 16, buffers = [<input "arg0" : f32 ["T"]>]>
// CHECK: llvm.func @copy(%{{.*}}: !llvm.ptr, %{{.*}}: i32)
// CHECK-SAME: moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [1, 1, 1], smem = 0, args = ["arg0", i32 "T"], dependent = true>
// CHECK-NEXT: llvm.mlir.constant
// CHECK-NEXT: nvvm.griddepcontrol wait
module attributes {gpu.container_module} {
  gpu.module @lowered attributes {moe.launch_plan = #moe.launch_plan<
      tokens_max = 16, buffers = [<input "arg0" : f32 ["T"]>]>} {
    llvm.func @copy(%arg0: !llvm.ptr, %tokens: i32)
        attributes {gpu.kernel, nvvm.kernel,
                    moe.launch = #moe.launch<grid = ["T", "1", "1"],
                                             block = [1, 1, 1], smem = 0,
                                             args = ["arg0", i32 "T"],
                                             dependent = true>} {
      %one = llvm.mlir.constant(1 : i32) : i32
      nvvm.griddepcontrol wait
      %x = llvm.load %arg0 : !llvm.ptr -> f32
      llvm.return
    }
  }
}

// A peer table: the kernel takes the pointer to an array of pointers, one
// per rank's slice of an exchange buffer (the caller's tensor is rank 1's).
// CHECK-LABEL: gpu.module @exchange
// CHECK-SAME: buffers = [<output "result0" : i32 ["5", "2"] exchange <world = 2, rank = 1>>]
// CHECK: gpu.func @dispatch(%{{.*}}: !llvm.ptr, %{{.*}}: i32) kernel
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [32, 1, 1], smem = 0, args = [peers "result0", i32 "T"]>
module attributes {gpu.container_module} {
  gpu.module @exchange attributes {moe.launch_plan = #moe.launch_plan<
      tokens_max = 4, buffers = [<output "result0" : i32 ["5", "2"]
                                  exchange <world = 2, rank = 1>>]>} {
    gpu.func @dispatch(%counts: !llvm.ptr, %tokens: i32) kernel
        attributes {moe.launch = #moe.launch<grid = ["1", "1", "1"],
                                             block = [32, 1, 1], smem = 0,
                                             args = [peers "result0", i32 "T"]>} {
      gpu.return
    }
  }
}

// The entries of a plan, written on their own.
// CHECK-LABEL: func.func private @entries
// CHECK-SAME: buffer = #moe.plan_buffer<workspace "route_block_offsets" : i32 ["cdiv(T*9,512)", "257"]>
// CHECK-SAME: map = #moe.plan_tensor_map<"arg5_map" over "arg5" box [64, 64] swizzle 0>
func.func private @entries() attributes {
    buffer = #moe.plan_buffer<workspace "route_block_offsets" : i32 ["cdiv(T*9,512)", "257"]>,
    map = #moe.plan_tensor_map<"arg5_map" over "arg5" box [64, 64] swizzle 0>}
