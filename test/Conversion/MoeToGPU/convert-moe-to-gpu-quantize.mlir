// convert-moe-to-gpu on moe.quantize: warps striding over the (row, group
// of columns) pairs (the last group ragged) in a grid of at most the blocks
// 132 multiprocessors hold (132 x 8), the group's amax by NaN-propagating maxima over a
// butterfly, scale = max(amax, 1e-10) / 448 stored by lane 0, and each value
// divided by it and rounded by cvt.rn.satfinite to e4m3; rows(%n) bounds the
// rows computed by the count read on the device, not T; a static scale(%s)
// is a caller tensor of one element that each warp reads once instead of
// taking the amax.
// RUN: moe-opt %s --split-input-file --convert-moe-to-gpu | FileCheck %s

// CHECK-LABEL: func.func @quantize
// CHECK: moe.launch_plan = #moe.launch_plan<tokens_max = 16384, buffers = [<input "arg0" : bf16 ["T", "200"]>, <output "result0" : f8E4M3FN ["T", "200"]>, <output "result1" : f32 ["T", "2"]>]>
// CHECK: gpu.func @moe_quantize_0(%[[X:.*]]: memref<16384x200xbf16>, %[[Q:.*]]: memref<16384x200xf8E4M3FN>, %[[S:.*]]: memref<16384x2xf32>, %[[T:.*]]: i32)
// CHECK-SAME: grid = ["min(cdiv(T*2,8),1056)", "1", "1"], block = [256, 1, 1]
// CHECK: %[[ROWS:.*]] = arith.index_cast %[[T]]
// CHECK: %[[GRID:.*]] = gpu.grid_dim x
// CHECK: %[[WARPS:.*]] = arith.muli %[[GRID]], %c8
// CHECK: %[[PAIRS:.*]] = arith.muli %[[ROWS]], %c2
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[PAIRS]] step %[[WARPS]]
// CHECK: %[[C200:.*]] = arith.constant 200 : index
// CHECK: %[[END:.*]] = arith.minui %{{.*}}, %[[C200]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[END]] step %c32
// CHECK: math.absf
// CHECK: arith.maximumf
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: %[[FLOOR:.*]] = arith.constant 1.000000e-10 : f32
// CHECK: %[[AMAX:.*]] = arith.maximumf %{{.*}}, %[[FLOOR]]
// CHECK: %[[SCALE:.*]] = arith.divf %[[AMAX]], %{{.*}} : f32
// CHECK: memref.store %[[SCALE]], %[[S]]
// CHECK: scf.for
// CHECK: %[[SCALED:.*]] = arith.divf %{{.*}}, %[[SCALE]] : f32
// CHECK: %[[PAIR:.*]] = nvvm.convert.f32x2.to.f8x2 %{{.*}}, %[[SCALED]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// CHECK: %[[BYTE:.*]] = arith.trunci %[[PAIR]] : i16 to i8
// CHECK: %[[CODE:.*]] = arith.bitcast %[[BYTE]] : i8 to f8E4M3FN
// CHECK: memref.store %[[CODE]], %[[Q]]
func.func @quantize(%x: tensor<?x200xbf16>) -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>) {
  %q, %s = moe.quantize %x {group_size = 128}
         : (tensor<?x200xbf16>) -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>)
  return %q, %s : tensor<?x200xf8E4M3FN>, tensor<?x2xf32>
}

// -----

// CHECK-LABEL: func.func @quantize_rows
// CHECK: gpu.func @moe_quantize_0(%{{.*}}: memref<100x64xf32>, %[[N:.*]]: memref<i32>,
// CHECK-SAME: grid = ["min(cdiv(100,8),1056)", "1", "1"]
// CHECK: %[[COUNT:.*]] = memref.load %[[N]][]
// CHECK: %[[LIMIT:.*]] = arith.index_cast %[[COUNT]]
// CHECK: %[[PAIRS:.*]] = arith.muli %[[LIMIT]], %c1
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[PAIRS]] step
func.func @quantize_rows(%x: tensor<100x64xf32>, %n: tensor<i32>) -> (tensor<100x64xf8E4M3FN>, tensor<100x1xf32>) {
  %q, %s = moe.quantize %x rows(%n) {group_size = 64}
         : (tensor<100x64xf32>, tensor<i32>) -> (tensor<100x64xf8E4M3FN>, tensor<100x1xf32>)
  return %q, %s : tensor<100x64xf8E4M3FN>, tensor<100x1xf32>
}

// -----

// The grid covers every row of every group when the rows are a sum in T
// (sorted rows, T*S + E*(block_m-1)): the sum is parenthesized.
// CHECK-LABEL: func.func @quantize_sorted_rows
// CHECK: gpu.func @moe_quantize_{{[0-9]+}}(
// CHECK-SAME: grid = ["min(cdiv((T*2+252)*2,8),1056)", "1", "1"]
func.func @quantize_sorted_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                                %w: tensor<4x256x64xf32>) -> tensor<?x2xf32> {
  %sorted, %experts, %padded = moe.route %ids {num_experts = 4, block_m = 64}
      : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %padded
         input(token) output(sorted) {block_m = 64, num_slots = 2}
       : (tensor<?x64xf32>, tensor<4x256x64xf32>, tensor<?xi32>, tensor<?xi32>,
          tensor<i32>) -> tensor<?x256xf32>
  %q, %s = moe.quantize %h rows(%padded) {group_size = 128}
         : (tensor<?x256xf32>, tensor<i32>) -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>)
  return %s : tensor<?x2xf32>
}

// -----

// A static scale: the kernel takes the [1] caller tensor after the input,
// reads it once before its loop over (row, group) pairs, takes no amax (no
// shuffles), stores the scale as each group's and divides each value by it.
// CHECK-LABEL: func.func @quantize_static
// CHECK: moe.launch_plan = #moe.launch_plan<tokens_max = 16384, buffers = [<input "arg0" : bf16 ["T", "200"]>, <input "arg1" : f32 ["1"]>, <output "result0" : f8E4M3FN ["T", "200"]>, <output "result1" : f32 ["T", "2"]>]>
// CHECK: gpu.func @moe_quantize_0(%[[X:.*]]: memref<16384x200xbf16>, %[[A:.*]]: memref<1xf32>, %[[Q:.*]]: memref<16384x200xf8E4M3FN>, %[[S:.*]]: memref<16384x2xf32>, %{{.*}}: i32)
// CHECK-SAME: args = ["arg0", "arg1", "result0", "result1", i32 "T"]
// CHECK: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[SCALE:.*]] = memref.load %[[A]][%[[ZERO]]] : memref<1xf32>
// CHECK-NOT: gpu.shuffle
// CHECK: scf.for
// CHECK-NOT: gpu.shuffle
// CHECK: memref.store %[[SCALE]], %[[S]]
// CHECK-NOT: gpu.shuffle
// CHECK: %[[SCALED:.*]] = arith.divf %{{.*}}, %[[SCALE]] : f32
// CHECK: nvvm.convert.f32x2.to.f8x2 %{{.*}}, %[[SCALED]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>}
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return
func.func @quantize_static(%x: tensor<?x200xbf16>, %s: tensor<1xf32>) -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>) {
  %q, %scales = moe.quantize %x scale(%s) {group_size = 128}
         : (tensor<?x200xbf16>, tensor<1xf32>) -> (tensor<?x200xf8E4M3FN>, tensor<?x2xf32>)
  return %q, %scales : tensor<?x200xf8E4M3FN>, tensor<?x2xf32>
}
