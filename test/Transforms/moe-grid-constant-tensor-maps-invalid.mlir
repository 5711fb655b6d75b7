// moe-grid-constant-tensor-maps rejects a moe.tensor_maps list it cannot honour.
// RUN: moe-opt %s --split-input-file --verify-diagnostics --moe-grid-constant-tensor-maps -o /dev/null
gpu.module @not_a_kernel {
  // expected-error @below {{'llvm.func' op has 'moe.tensor_maps' but is not a kernel}}
  llvm.func @helper(%map: !llvm.ptr) attributes {moe.tensor_maps = array<i64: 0>} {
    llvm.return
  }
}

// -----

gpu.module @out_of_range {
  // expected-error @below {{'llvm.func' op 'moe.tensor_maps' names argument 2 of a kernel with 2 arguments}}
  llvm.func @k(%map: !llvm.ptr, %out: !llvm.ptr) attributes {nvvm.kernel, moe.tensor_maps = array<i64: 2>} {
    llvm.return
  }
}

// -----

gpu.module @twice {
  // expected-error @below {{'llvm.func' op 'moe.tensor_maps' names argument 0 twice}}
  llvm.func @k(%map: !llvm.ptr, %out: !llvm.ptr) attributes {nvvm.kernel, moe.tensor_maps = array<i64: 0, 0>} {
    llvm.return
  }
}

// -----

gpu.module @not_a_pointer {
  // expected-error @below {{'llvm.func' op 'moe.tensor_maps' names argument 1 of type 'i32', not a pointer to a tensor map}}
  llvm.func @k(%map: !llvm.ptr, %n: i32) attributes {nvvm.kernel, moe.tensor_maps = array<i64: 1>} {
    llvm.return
  }
}

// -----

gpu.module @not_an_array {
  // expected-error @below {{'llvm.func' op expects 'moe.tensor_maps' to be an array<i64> of argument indices}}
  llvm.func @k(%map: !llvm.ptr) attributes {nvvm.kernel, moe.tensor_maps = 0 : i64} {
    llvm.return
  }
}
