// convert-moe-to-gpu compiles a layer's gate, route and combine into kernels
// of gpu.module @moe_kernels and records the launch plan: buffers named after
// the signature (argN, resultN) or the op (workspaces) with dims in T, and
// per kernel its grid, block and argument buffers.
// RUN: moe-opt %s --convert-moe-to-gpu="tokens-max=1024" | FileCheck %s
// RUN: not moe-opt %s --convert-moe-to-gpu="tokens-max=2147483648" 2>&1 | FileCheck %s --check-prefix=BAD-TOKENS-MAX
// RUN: not moe-opt %s --convert-moe-to-gpu="num-sms=4611686018427387904" 2>&1 | FileCheck %s --check-prefix=BAD-SMS
// RUN: not moe-opt %s --convert-moe-to-gpu="tokens-max=1024 tokens=1025" 2>&1 | FileCheck %s --check-prefix=BAD-TOKENS

// Kernels take T as an i32.
// BAD-TOKENS-MAX: convert-moe-to-gpu: tokens-max must be in [1, 2147483647], got 2147483648
// BAD-SMS: convert-moe-to-gpu: num-sms must be in [1, 1024], got 4611686018427387904
// BAD-TOKENS: convert-moe-to-gpu: tokens must be in [0, 1024], got 1025

// CHECK: module attributes {gpu.container_module}
// CHECK: gpu.module @moe_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">]
// CHECK-SAME: moe.launch_plan = #moe.launch_plan<tokens_max = 1024, buffers = [
// CHECK-SAME: <input "arg0" : f32 ["T", "256"]>
// CHECK-SAME: <input "arg1" : f32 ["256"]>
// CHECK-SAME: <input "arg2" : bf16 ["T", "9", "64"]>
// CHECK-SAME: <output "result0" : f32 ["T", "9"]>
// CHECK-SAME: <output "result1" : i32 ["T", "9"]>
// CHECK-SAME: <output "result2" : i32 ["T*9+16191"]>
// CHECK-SAME: <output "result3" : i32 ["cdiv(T*9+16191,64)"]>
// CHECK-SAME: <output "result4" : i32 []>
// CHECK-SAME: <workspace "route_block_offsets" : i32 ["cdiv(T*9,512)", "257"]>
// CHECK-SAME: <workspace "route_expert_offsets" : i32 ["257"]>
// CHECK-SAME: <output "result5" : bf16 ["T", "64"]>]>

// The gate: a warp per token, shapes at tokens-max, T last.
// CHECK: gpu.func @moe_gate_0(%{{.*}}: memref<1024x256xf32>, %{{.*}}: memref<256xf32>, %{{.*}}: memref<1024x9xf32>, %{{.*}}: memref<1024x9xi32>, %{{.*}}: i32) kernel
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK-SAME: moe.launch = #moe.launch<grid = ["cdiv(T,4)", "1", "1"], block = [128, 1, 1], smem = 0, args = ["arg0", "arg1", "result0", "result1", i32 "T"], dependent = true>
// Sigmoid through the routing exp; group scores from warp reductions of
// top-two keys (max, count of holders, max of the rest), each scored in
// the lane that holds it (group g in lane g); the four groups kept by
// arg-max rounds over the lanes (redux max of the keys, redux min of the
// groups holding it), gathered into a bit mask.
// CHECK: llvm.intr.fma
// CHECK: arith.divf
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: nvvm.redux.sync umax
// CHECK: nvvm.redux.sync add
// CHECK: nvvm.redux.sync umax
// CHECK-COUNT-4: nvvm.redux.sync umin
// CHECK: %[[KEPT:.*]] = arith.shli %{{.*}}, %{{.*}} : i32
// CHECK: nvvm.redux.sync or %[[KEPT]]
// Each lane ranks its three best eligible experts once (a strictly larger
// key moves an entry down); a round takes the best head of the warp, whose
// unbiased score comes from the lane that holds it.
// CHECK: arith.cmpi ugt
// CHECK: %[[BEST:.*]] = nvvm.redux.sync umax
// CHECK: %[[EXPERT:.*]] = nvvm.redux.sync umin
// CHECK: %[[LANE:.*]] = arith.andi %[[EXPERT]], %c31
// CHECK: gpu.shuffle idx %{{.*}}, %[[LANE]]
// Once a lane has given up all three (the marker, INT32_MAX - 1, reaches
// its head), every lane ranks the experts not yet chosen again.
// CHECK: %[[SPENT:.*]] = arith.cmpi eq, %{{.*}}, %c2147483646
// CHECK: %[[ANY:.*]] = nvvm.vote.sync any %{{.*}}, %[[SPENT]]
// CHECK: scf.if %[[ANY]] -> (i32, i32, i32, i32, i32, i32, f32, f32, f32)
// CHECK: arith.cmpi ugt
// CHECK: scf.yield
// Lane s stores slot s: the ninth, the shared expert, with weight 1.
// CHECK: %[[SLOT:.*]] = arith.addi %{{.*}}, %c0
// CHECK: arith.divf
// CHECK: arith.cmpi ult, %[[SLOT]], %c8
// CHECK: arith.cmpi ult, %[[SLOT]], %c9
// CHECK: memref.store %{{.*}}[%{{.*}}, %[[SLOT]]] : memref<1024x9xi32>
// CHECK: memref.store %{{.*}}[%{{.*}}, %[[SLOT]]] : memref<1024x9xf32>

// The histogram grid also fills every row of the sorted ids (up to the
// capacity T*9 + 257*63) with the sentinel T*9 and every block of the
// expert ids with -1, a grid-stride loop over its threads; the scan's blocks
// and the placement's rows go over the fill.
// CHECK: gpu.func @moe_route_count_1(%{{.*}}: memref<1024x9xi32>, %{{.*}}: memref<18x257xi32>, %[[SORTED:.*]]: memref<25407xi32>, %[[BLOCKS:.*]]: memref<397xi32>, %{{.*}}: i32) workgroup(%[[COUNTS:.*]] : memref<257xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK-SAME: grid = ["cdiv(T*9,512)", "1", "1"]
// CHECK: %[[GRID:.*]] = gpu.grid_dim x
// CHECK: %[[THREADS:.*]] = arith.muli %[[GRID]], %c512
// CHECK: %[[SLOTS:.*]] = arith.muli %{{.*}}, %c9
// CHECK: %[[SENTINEL:.*]] = arith.index_cast %[[SLOTS]] : index to i32
// CHECK: %[[CAPACITY:.*]] = arith.addi %[[SLOTS]], %c16191
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %[[CAPACITY]] step %[[THREADS]]
// CHECK-NEXT: memref.store %[[SENTINEL]], %[[SORTED]][%[[ROW]]]
// CHECK: scf.for %[[BLOCK:.*]] = %{{.*}} to %{{.*}} step %[[THREADS]]
// CHECK: memref.store %c-1_i32{{.*}}, %[[BLOCKS]][%[[BLOCK]]]
// CHECK: gpu.barrier
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[COUNTS]]
// CHECK: gpu.barrier

// One block scans (shuffles within each warp, then over the warps' totals)
// and writes each expert's blocks; it reads and writes no sorted row.
// CHECK: gpu.func @moe_route_scan_2(
// CHECK-SAME: workgroup(%{{.*}} : memref<1024xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK-SAME: grid = ["1", "1", "1"]
// CHECK-SAME: args = ["route_block_offsets", "route_expert_offsets", "result3", "result4", i32 "T"]
// CHECK: gpu.shuffle up
// CHECK-NOT: gpu.func
// CHECK: memref.store %{{.*}} : memref<397xi32>

// CHECK: gpu.func @moe_route_place_3(
// CHECK-SAME: workgroup(%{{.*}} : memref<16x257xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK: nvvm.match.sync any
// CHECK: nvvm.read.ptx.sreg.lanemask.lt
// CHECK: llvm.intr.ctpop

// 16 bytes per thread: 8 bf16 of a row, summed over the 9 slots in fp32.
// CHECK: gpu.func @moe_combine_4(%{{.*}}: memref<1024x9x64xbf16>, %{{.*}}: memref<1024x64xbf16>, %{{.*}}: i32) kernel
// CHECK-SAME: grid = ["cdiv(T*8,256)", "1", "1"]
// CHECK: vector.load %{{.*}} : memref<1024x9x64xbf16>, vector<8xbf16>
// CHECK: arith.extf %{{.*}} : vector<8xbf16> to vector<8xf32>
// CHECK: vector.store %{{.*}} : memref<1024x64xbf16>, vector<8xbf16>
func.func @routing(%logits: tensor<?x256xf32>, %bias: tensor<256xf32>, %rows: tensor<?x9x64xbf16>)
    -> (tensor<?x9xf32>, tensor<?x9xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x64xbf16>) {
  %w, %ids = moe.gate %logits bias %bias {router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4, renormalize = true, routed_scaling_factor = 2.5, num_shared_experts = 1>}
    : (tensor<?x256xf32>, tensor<256xf32>) -> (tensor<?x9xf32>, tensor<?x9xi32>)
  %s, %e, %n = moe.route %ids {num_experts = 257, block_m = 64} : (tensor<?x9xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %y = moe.combine %rows : (tensor<?x9x64xbf16>) -> tensor<?x64xbf16>
  return %w, %ids, %s, %e, %n, %y : tensor<?x9xf32>, tensor<?x9xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x64xbf16>
}
