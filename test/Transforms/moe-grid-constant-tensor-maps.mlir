// moe-grid-constant-tensor-maps makes the kernel arguments that
// moe.grid_constant_args lists by-value 128-byte grid constants, after
// convert-gpu-to-nvvm (which keeps the kernel's discardable attributes but
// not llvm.byval); the PTX then takes the descriptor as a 64-byte aligned
// parameter array and the TMA instructions read it from the parameter space.
// RUN: moe-opt %s --convert-nvgpu-to-nvvm --convert-gpu-to-nvvm=use-bare-ptr-memref-call-conv=true \
// RUN:   --reconcile-unrealized-casts --moe-grid-constant-tensor-maps | FileCheck %s
// RUN: moe-opt %s --convert-nvgpu-to-nvvm --convert-gpu-to-nvvm=use-bare-ptr-memref-call-conv=true \
// RUN:   --reconcile-unrealized-casts --moe-grid-constant-tensor-maps --gpu-module-to-binary=format=isa \
// RUN:   | FileCheck %s --check-prefix=PTX
// RUN: %if ptxas %{ moe-opt %s --convert-nvgpu-to-nvvm --convert-gpu-to-nvvm=use-bare-ptr-memref-call-conv=true \
// RUN:   --reconcile-unrealized-casts --moe-grid-constant-tensor-maps --gpu-module-to-binary=format=bin \
// RUN:   | FileCheck %s --check-prefix=CUBIN %}

// CHECK-LABEL: llvm.func @tma_tile
// CHECK-SAME: (%{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}, %{{.*}}: i64)
// CHECK-SAME: attributes {gpu.kernel, nvvm.kernel}
// CHECK: nvvm.prefetch tensormap, %arg0
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global {{.*}}, %arg0,

// PTX: .visible .entry tma_tile(
// PTX-SAME: .param .align 64 .b8 tma_tile_param_0[128],
// PTX-SAME: .param .u64 tma_tile_param_1
// PTX-SAME: mov.b64 \09[[PARAM:%rd[0-9]+]], tma_tile_param_0;
// PTX-SAME: cvta.param.u64 \09[[MAP:%rd[0-9]+]], [[PARAM]];
// PTX-SAME: prefetch.param.tensormap
// PTX-SAME: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%rd{{[0-9]+}}], {{\[}}[[MAP]], {%r{{[0-9]+}}, %r{{[0-9]+}}}]

// CUBIN: bin = "\7FELF

// A 64x64 f16 tile brought into shared memory through a descriptor argument:
// prefetch the descriptor, arm an mbarrier with the tile's bytes, issue the
// 2-D load (the wait is left out: it has nothing to do with the descriptor).
!tile = memref<64x64xf16, 3>
!map = !nvgpu.tensormap.descriptor<tensor = !tile, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {gpu.container_module} {
  gpu.module @kernels [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    memref.global @smem : memref<0xi8, 3> {alignment = 1024 : i64}
    gpu.func @tma_tile(%map_ptr: !llvm.ptr, %row: index) kernel
        attributes {moe.grid_constant_args = array<i64: 0>} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %bytes = arith.constant 8192 : index
      %map = builtin.unrealized_conversion_cast %map_ptr : !llvm.ptr to !map
      %base = memref.get_global @smem : memref<0xi8, 3>
      %tile = memref.view %base[%c0][] : memref<0xi8, 3> to !tile
      %barrier = nvgpu.mbarrier.create -> !barrier
      nvgpu.tma.prefetch.descriptor %map : !map
      nvgpu.mbarrier.init %barrier[%c0], %c1 : !barrier
      gpu.barrier
      nvgpu.mbarrier.arrive.expect_tx %barrier[%c0], %bytes : !barrier
      nvgpu.tma.async.load %map[%c0, %row], %barrier[%c0] to %tile : !map, !barrier -> !tile
      gpu.return
    }
  }
}
