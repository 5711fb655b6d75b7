// moe-cpu-pipeline lowers a whole layer to the LLVM dialect: nothing of moe,
// tensors, scf or memref is left, the routing math becomes LLVM's fma, erf a
// libm call, buffers come from malloc and intermediates are
// freed.
// RUN: moe-opt %s --moe-cpu-pipeline | FileCheck %s

// CHECK-NOT: moe.
// CHECK-NOT: tensor<
// CHECK-NOT: scf.
// CHECK-NOT: memref.
// CHECK-DAG: llvm.func @erff(f32) -> f32
// CHECK-DAG: llvm.func @malloc(i64) -> !llvm.ptr
// CHECK-DAG: llvm.func @free(!llvm.ptr)
// CHECK: llvm.func @layer(
// CHECK: llvm.intr.fma
// CHECK: llvm.call @erff
// CHECK: llvm.call @free
func.func @layer(%x: tensor<?x64xbf16>, %l: tensor<?x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) -> tensor<?x64xbf16> {
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(gelu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
