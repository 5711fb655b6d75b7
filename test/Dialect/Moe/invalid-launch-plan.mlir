// Every rule of the launch plan attributes (#moe.launch_plan, #moe.launch,
// moe.grid_constant_args) and of where they may appear rejects a malformed
// plan with its own diagnostic.
// RUN: moe-opt %s --split-input-file --verify-diagnostics

//===----------------------------------------------------------------------===//
// #moe.plan_buffer and #moe.plan_tensor_map
//===----------------------------------------------------------------------===//

// expected-error @below {{buffer name 'arg-0' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)}}
func.func private @buffer_name() attributes {b = #moe.plan_buffer<input "arg-0" : f32 ["T"]>}

// -----

// expected-error @below {{buffer 'arg0' must hold integers or floats of whole bytes, not 'i1'}}
func.func private @buffer_type() attributes {b = #moe.plan_buffer<input "arg0" : i1 ["T"]>}

// -----

// expected-error @below {{dim 'cdiv(T,4' of buffer 'arg0' is not a size expression in T}}
func.func private @buffer_dim() attributes {b = #moe.plan_buffer<input "arg0" : f32 ["cdiv(T,4"]>}

// -----

// expected-error @below {{dim 'T + 1' of buffer 'arg0' is not a size expression in T}}
func.func private @buffer_dim_spaces() attributes {b = #moe.plan_buffer<input "arg0" : f32 ["T + 1"]>}

// -----

// expected-error @below {{expected ::mlir::moe::BufferRole to be one of: input, output, workspace}}
// expected-error @below {{failed to parse Moe_PlanBufferAttr parameter 'role'}}
func.func private @buffer_role() attributes {b = #moe.plan_buffer<scratch "arg0" : f32 ["T"]>}

// -----

// expected-error @below {{tensor map name '1map' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)}}
func.func private @map_name() attributes {m = #moe.plan_tensor_map<"1map" over "arg0" box [64] swizzle 0>}

// -----

// expected-error @below {{tensor map 'm' must have a box of rank 1 to 5, got rank 6}}
func.func private @map_rank() attributes {m = #moe.plan_tensor_map<"m" over "arg0" box [1, 1, 1, 1, 1, 1] swizzle 0>}

// -----

// expected-error @below {{tensor map 'm' must have box sizes in [1, 256]}}
func.func private @map_box() attributes {m = #moe.plan_tensor_map<"m" over "arg0" box [512, 1] swizzle 0>}

// -----

// expected-error @below {{tensor map 'm' must have a swizzle of 0, 32, 64 or 128 bytes, got 16}}
func.func private @map_swizzle() attributes {m = #moe.plan_tensor_map<"m" over "arg0" box [64] swizzle 16>}

// -----

//===----------------------------------------------------------------------===//
// #moe.launch_plan
//===----------------------------------------------------------------------===//

// expected-error @below {{tokens_max must be at least 1, got 0}}
gpu.module @tokens_max attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 0, buffers = []>} {}

// -----

// Kernels take T as an i32.
// expected-error @below {{tokens_max must be at most 2147483647, got 4611686018427387904}}
gpu.module @tokens_max_i32 attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 4611686018427387904, buffers = []>} {}

// -----

// expected-error @below {{buffer 'arg0' is defined twice}}
gpu.module @buffer_twice attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>, <workspace "arg0" : f32 ["T"]>]>} {}

// -----

// expected-error @below {{zero_fill names 'partials', which is not a buffer of the plan}}
gpu.module @zero_fill attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>], zero_fill = ["partials"]>} {}

// -----

// expected-error @below {{tensor map 'arg0' reuses the name of a buffer or tensor map}}
gpu.module @map_name_taken attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>], tensor_maps = [<"arg0" over "arg0" box [8] swizzle 0>]>} {}

// -----

// expected-error @below {{tensor map 'm' is over 'arg1', which is not a buffer of the plan}}
gpu.module @map_buffer attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>], tensor_maps = [<"m" over "arg1" box [8] swizzle 0>]>} {}

// -----

// expected-error @below {{tensor map 'm' has a box of 2 dims over buffer 'arg0' of 1}}
gpu.module @map_box_rank attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>], tensor_maps = [<"m" over "arg0" box [1, 8] swizzle 0>]>} {}

// -----

// expected-error @below {{'func.func' op has 'moe.launch_plan', which only a gpu.module may carry}}
func.func private @plan_on_func() attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = []>}

// -----

// expected-error @below {{'gpu.module' op expects 'moe.launch_plan' to be a #moe.launch_plan, got [{name = "arg0"}]}}
gpu.module @plan_untyped attributes {moe.launch_plan = [{name = "arg0"}]} {}

// -----

//===----------------------------------------------------------------------===//
// #moe.launch
//===----------------------------------------------------------------------===//

// expected-error @below {{grid must have 3 sizes, got 2}}
func.func private @grid_rank() attributes {l = #moe.launch<grid = ["T", "1"], block = [32, 1, 1], smem = 0, args = []>}

// -----

// expected-error @below {{grid size 'cdiv(T)' is not a size expression in T}}
func.func private @grid_size() attributes {l = #moe.launch<grid = ["cdiv(T)", "1", "1"], block = [32, 1, 1], smem = 0, args = []>}

// -----

// expected-error @below {{block must have 3 sizes, got 1}}
func.func private @block_rank() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [32], smem = 0, args = []>}

// -----

// expected-error @below {{block 32x0x1 must have positive sizes and at most 1024 threads}}
func.func private @block_zero() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [32, 0, 1], smem = 0, args = []>}

// -----

// expected-error @below {{block 64x32x1 must have positive sizes and at most 1024 threads}}
func.func private @block_threads() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [64, 32, 1], smem = 0, args = []>}

// -----

// expected-error @below {{smem must be in [0, 2^32), got -1}}
func.func private @smem() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = -1, args = []>}

// -----

// expected-error @below {{argument 'map:arg1_map' is not a buffer or tensor map name}}
func.func private @arg_name() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = ["map:arg1_map"]>}

// -----

// expected-error @below {{argument 'T*' is not a size expression in T}}
func.func private @arg_scalar() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [i32 "T*"]>}

// -----

// expected-error @below {{expected a quoted buffer name, 'map', 'i32' or 'peers', got 'buffer'}}
// expected-error @below {{failed to parse Moe_LaunchAttr parameter 'args'}}
func.func private @arg_kind() attributes {l = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [buffer "arg0"]>}

// -----

// expected-error @below {{'func.func' op has 'moe.launch', which only a kernel may carry}}
func.func private @launch_on_func() attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = []>}

// -----

gpu.module @launch_untyped {
  // expected-error @below {{'gpu.func' op expects 'moe.launch' to be a #moe.launch, got {block = array<i64: 32, 1, 1>}}}
  gpu.func @k() kernel attributes {moe.launch = {block = array<i64: 32, 1, 1>}} {
    gpu.return
  }
}

// -----

gpu.module @no_plan {
  // expected-error @below {{'gpu.func' op has a 'moe.launch' but its gpu.module has no 'moe.launch_plan'}}
  gpu.func @k(%t: i32) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [i32 "T"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_count attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>]>} {
  // expected-error @below {{'gpu.func' op takes 1 arguments but its 'moe.launch' passes 2}}
  gpu.func @k(%t: i32) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = ["arg0", i32 "T"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_buffer attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>]>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' argument 0 names 'result0', which is not a buffer of the module's 'moe.launch_plan'}}
  gpu.func @k(%x: memref<8xf32>) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = ["result0"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_map attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>]>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' argument 0 names 'arg0', which is not a tensor map of the module's 'moe.launch_plan'}}
  gpu.func @k(%x: !llvm.ptr) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [map "arg0"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_element_type attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>]>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' argument 0 (buffer 'arg0') cannot be passed for a 'memref<8xbf16>'}}
  gpu.func @k(%x: memref<8xbf16>) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = ["arg0"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_map_type attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>], tensor_maps = [<"m" over "arg0" box [8] swizzle 0>]>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' argument 0 (map 'm') cannot be passed for a 'memref<8xf32>'}}
  gpu.func @k(%x: memref<8xf32>) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [map "m"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_peers_type attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["2", "T"] exchange <world = 4, rank = 0>>]>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' argument 0 (peers 'arg0') cannot be passed for a 'memref<2x8xf32>'}}
  gpu.func @k(%x: memref<2x8xf32>) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [peers "arg0"]>} {
    gpu.return
  }
}

// -----

gpu.module @arg_scalar_type attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = []>} {
  // expected-error @below {{'llvm.func' op 'moe.launch' argument 0 (i32 'T') cannot be passed for a 'i64'}}
  llvm.func @k(%t: i64) attributes {gpu.kernel, moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [i32 "T"]>} {
    llvm.return
  }
}

// -----

gpu.module @known_block_size attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = []>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' block differs from the kernel's known_block_size}}
  gpu.func @k(%t: i32) kernel attributes {known_block_size = array<i32: 128, 1, 1>, moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [i32 "T"]>} {
    gpu.return
  }
}

// -----

// A dependent launch may start the kernel while the kernel before it still
// runs: the kernel must wait for it before it touches memory.
gpu.module @dependent_without_wait attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<output "result0" : i32 ["8"]>]>} {
  // expected-error @below {{'gpu.func' op has a dependent 'moe.launch' but does not begin with 'nvvm.griddepcontrol wait' (before any op that touches memory in its entry block)}}
  gpu.func @k(%x: memref<8xi32>, %t: i32) kernel attributes {moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [32, 1, 1], smem = 0, args = ["result0", i32 "T"], dependent = true>} {
    nvvm.griddepcontrol launch_dependents
    gpu.return
  }
}

// -----

gpu.module @dependent_store_first attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<output "result0" : i32 ["8"]>]>} {
  // expected-error @below {{'gpu.func' op has a dependent 'moe.launch' but does not begin with 'nvvm.griddepcontrol wait'}}
  gpu.func @k(%x: memref<8xi32>, %t: i32) kernel attributes {moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [32, 1, 1], smem = 0, args = ["result0", i32 "T"], dependent = true>} {
    %c0 = arith.constant 0 : index
    memref.store %t, %x[%c0] : memref<8xi32>
    nvvm.griddepcontrol wait
    gpu.return
  }
}

// -----

gpu.module @dependent_wait_in_branch attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = []>} {
  // expected-error @below {{'gpu.func' op has a dependent 'moe.launch' but does not begin with 'nvvm.griddepcontrol wait'}}
  gpu.func @k(%t: i32) kernel attributes {moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [32, 1, 1], smem = 0, args = [i32 "T"], dependent = true>} {
    %c0 = arith.constant 0 : i32
    %first = arith.cmpi eq, %t, %c0 : i32
    scf.if %first {
      nvvm.griddepcontrol wait
    }
    gpu.return
  }
}

// -----

//===----------------------------------------------------------------------===//
// moe.grid_constant_args
//===----------------------------------------------------------------------===//

gpu.module @not_a_kernel {
  // expected-error @below {{'llvm.func' op has 'moe.grid_constant_args', which only a kernel may carry}}
  llvm.func @helper(%map: !llvm.ptr) attributes {moe.grid_constant_args = array<i64: 0>} {
    llvm.return
  }
}

// -----

gpu.module @out_of_range {
  // expected-error @below {{'llvm.func' op 'moe.grid_constant_args' names argument 2 of a kernel with 2 arguments}}
  llvm.func @k(%map: !llvm.ptr, %out: !llvm.ptr) attributes {nvvm.kernel, moe.grid_constant_args = array<i64: 2>} {
    llvm.return
  }
}

// -----

gpu.module @twice {
  // expected-error @below {{'llvm.func' op 'moe.grid_constant_args' names argument 0 twice}}
  llvm.func @k(%map: !llvm.ptr, %out: !llvm.ptr) attributes {nvvm.kernel, moe.grid_constant_args = array<i64: 0, 0>} {
    llvm.return
  }
}

// -----

gpu.module @not_a_pointer {
  // expected-error @below {{'gpu.func' op 'moe.grid_constant_args' names argument 1 of type 'i32', not a pointer to a tensor map}}
  gpu.func @k(%map: !llvm.ptr, %n: i32) kernel attributes {moe.grid_constant_args = array<i64: 1>} {
    gpu.return
  }
}

// -----

gpu.module @untyped {
  // expected-error @below {{'llvm.func' op expects 'moe.grid_constant_args' to be an array<i64> of argument indices, got 0 : i64}}
  llvm.func @k(%map: !llvm.ptr) attributes {nvvm.kernel, moe.grid_constant_args = 0 : i64} {
    llvm.return
  }
}

// -----

gpu.module @not_the_maps attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["T"]>], tensor_maps = [<"m" over "arg0" box [8] swizzle 0>]>} {
  // expected-error @below {{'gpu.func' op 'moe.grid_constant_args' must list exactly the tensor map arguments of 'moe.launch', but argument 1 differs}}
  gpu.func @k(%map: !llvm.ptr, %x: !llvm.ptr) kernel attributes {moe.grid_constant_args = array<i64: 0, 1>, moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [map "m", "arg0"]>} {
    gpu.return
  }
}

// -----

//===----------------------------------------------------------------------===//
// moe.tuned and names outside the dialect
//===----------------------------------------------------------------------===//

// expected-error @below {{'func.func' op has 'moe.tuned', which only a moe.grouped_matmul may carry}}
func.func private @tuned_on_func() attributes {moe.tuned}

// -----

// expected-error @below {{'func.func' op expects 'moe.tuned' to be a unit attribute, got true}}
func.func private @tuned_untyped() attributes {moe.tuned = true}

// -----

// The module attribute's name before the plan was typed.
// expected-error @below {{'gpu.module' op has 'moe.tensormaps', which is not an attribute of the moe dialect}}
gpu.module @old_name attributes {moe.tensormaps = []} {}

// -----

// A peer table exists only for an exchange buffer, whose slices the caller binds.
gpu.module @arg_peers_not_exchanged attributes {moe.launch_plan = #moe.launch_plan<tokens_max = 8, buffers = [<input "arg0" : f32 ["2", "T"]>]>} {
  // expected-error @below {{'gpu.func' op 'moe.launch' argument 0 (peers 'arg0') names a buffer that is not an exchange buffer (no 'exchange' in the plan), so it has no peer table}}
  gpu.func @k(%x: !llvm.ptr) kernel attributes {moe.launch = #moe.launch<grid = ["T", "1", "1"], block = [32, 1, 1], smem = 0, args = [peers "arg0"]>} {
    gpu.return
  }
}

// -----

// expected-error @below {{workspace 'slices' cannot be an exchange buffer: the caller binds every rank's slice of one, which only a tensor has}}
func.func private @workspace_exchange() attributes {b = #moe.plan_buffer<workspace "slices" : f32 ["T"] exchange <world = 2, rank = 0>>}
