// moe-expert-parallel splits rank 1 of 2 of an expert-parallel layer into
// its phases: gate -> dispatch into all ranks' receive buffers -> signal;
// wait for every rank's dispatch -> the rank's receive buffer routed by its
// counts in blocks of block-m rows (chosen as for the single-device layer of
// all ranks' tokens, or given) -> the two grouped matmuls over its local
// experts in those blocks -> combine into all ranks' return buffers ->
// signal; wait for every rank's experts phase -> the sum of its returned
// rows. Routing blocks that overflow the i32 rows are refused, and
// moe-decompose refuses the undivided layer.
// RUN: moe-opt %s --moe-expert-parallel --split-input-file --verify-diagnostics | FileCheck %s
// RUN: moe-opt %s --moe-expert-parallel="block-m=16" --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=BLOCK16
// RUN: not moe-opt %s --moe-expert-parallel="block-m=2147483647" --split-input-file 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not moe-opt %s --moe-expert-parallel="block-m=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not moe-opt %s --moe-decompose --split-input-file 2>&1 | FileCheck %s --check-prefix=DECOMPOSE

// HUGE: error: 'moe.fused_moe' op moe-expert-parallel: block-m = 2147483647: T*S + E*(block_m-1) = 40*1 + 5*(2147483647-1) routed rows exceed 2147483647 (the kernels' slot ids and rows are i32)
// NEGATIVE: error: moe-expert-parallel: block-m must be in [0, 2147483647], got -1
// DECOMPOSE: error: 'moe.fused_moe' op moe-decompose: an expert-parallel layer is split by moe-expert-parallel first

// E = 8 routed experts over W = 2 ranks, X = 1 shared: L = 5 local experts;
// T = 4 tokens, S = 3 slots; C = T rows per (local expert, source rank):
// receive buffers of L*W*C = 40 rows.
// CHECK-LABEL: func.func @layer_dispatch
// The exchange buffers (and the [W, W] flags of the dispatch) are marked as
// such, so that a GPU rank holds one slice of each.
// CHECK-SAME: (%[[X:.*]]: tensor<4x64xbf16>, %[[L:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>, %[[ROWS:.*]]: tensor<2x40x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[WTS:.*]]: tensor<2x40xf32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[SLOTS:.*]]: tensor<2x40xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[COUNTS:.*]]: tensor<2x5x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[FLAGS:.*]]: tensor<2x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>})
// CHECK-NEXT: %[[W:.*]], %[[IDS:.*]] = moe.gate %[[L]] bias %[[B]] {{.*}} -> (tensor<4x3xf32>, tensor<4x3xi32>)
// CHECK-NEXT: %[[R:.*]], %[[RW:.*]], %[[RS:.*]], %[[RC:.*]] = moe.ep_dispatch %[[X]], %[[IDS]], %[[W]] into(%[[ROWS]], %[[WTS]], %[[SLOTS]], %[[COUNTS]]) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, num_experts = 8 : i64}
// Then the signal that the rows are stored.
// CHECK-NEXT: %[[SIGNALLED:.*]] = moe.ep_signal into(%[[FLAGS]]) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>} : (tensor<2x2xi32>) -> tensor<2x2xi32>
// CHECK-NEXT: return %[[R]], %[[RW]], %[[RS]], %[[RC]], %[[SIGNALLED]] :

// CHECK-LABEL: func.func @layer_experts
// The status of the rank's waits is no exchange buffer.
// CHECK-SAME: (%[[W13:.*]]: tensor<5x256x64xbf16>, %[[W2:.*]]: tensor<5x64x128xbf16>, %[[ROWS:.*]]: tensor<2x40x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[WTS:.*]]: tensor<2x40xf32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[SLOTS:.*]]: tensor<2x40xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[COUNTS:.*]]: tensor<2x5x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[RET:.*]]: tensor<2x4x3x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[DFLAGS:.*]]: tensor<2x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[CFLAGS:.*]]: tensor<2x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[STATUS:[^:]*]]: tensor<2xi32>) -> (tensor<2x4x3x64xbf16>, tensor<2x2xi32>, tensor<2xi32>)
// The wait for every rank's dispatch comes first, and the phase reads the
// receive buffers it guards.
// CHECK-NEXT: %[[WAITED:.*]], %[[READY:.*]]:4 = moe.ep_wait %[[DFLAGS]] into(%[[STATUS]]) guards(%[[ROWS]], %[[WTS]], %[[SLOTS]], %[[COUNTS]]) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 1 : i64}
// CHECK-DAG: %[[MY_ROWS:.*]] = tensor.extract_slice %[[READY]]#0[1, 0, 0] [1, 40, 64] [1, 1, 1] : tensor<2x40x64xbf16> to tensor<40x64xbf16>
// CHECK-DAG: %[[MY_SLOTS:.*]] = tensor.extract_slice %[[READY]]#2[1, 0] [1, 40] [1, 1] : tensor<2x40xi32> to tensor<40xi32>
// CHECK-DAG: %[[MY_COUNTS:.*]] = tensor.extract_slice %[[READY]]#3[1, 0, 0] [1, 5, 2] [1, 1, 1] : tensor<2x5x2xi32> to tensor<5x2xi32>
// CHECK-DAG: %[[MY_WTS:.*]] = tensor.extract_slice %[[READY]]#1[1, 0] [1, 40] [1, 1] : tensor<2x40xf32> to tensor<40xf32>
// CHECK: %[[ROUTED:.*]] = tensor.expand_shape %[[MY_WTS]] {{\[\[}}0, 1]] output_shape [40, 1] : tensor<40xf32> into tensor<40x1xf32>
// The single-device layer of the ranks' T*W = 8 tokens routes 24 slots over
// 9 experts in blocks of 64 rows: 40 + 5*63 = 355 positions, 6 blocks.
// CHECK: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[N:.*]] = moe.ep_route %[[MY_COUNTS]] {block_m = 64 : i64} : (tensor<5x2xi32>) -> (tensor<355xi32>, tensor<6xi32>, tensor<i32>)
// CHECK-NEXT: %[[H:.*]] = moe.grouped_matmul %[[MY_ROWS]], %[[W13]], %[[SORTED]], %[[EXPERTS]], %[[N]] input(token) output(sorted) activation(silu_and_mul) {block_m = 64 : i64, num_slots = 1 : i64}
// CHECK-SAME: -> tensor<355x128xbf16>
// CHECK-NEXT: %[[O:.*]] = moe.grouped_matmul %[[H]], %[[W2]], %[[SORTED]], %[[EXPERTS]], %[[N]] routed_weights(%[[ROUTED]]) input(sorted) output(slot) {block_m = 64 : i64, num_slots = 1 : i64}
// CHECK-SAME: -> tensor<40x1x64xbf16>
// CHECK-NEXT: %[[OROWS:.*]] = tensor.collapse_shape %[[O]] {{\[\[}}0, 1], [2]] : tensor<40x1x64xbf16> into tensor<40x64xbf16>
// CHECK-NEXT: %[[BACK:.*]] = moe.ep_combine %[[OROWS]], %[[MY_SLOTS]], %[[MY_COUNTS]] into(%[[RET]])
// Then the signal that the returned rows are stored.
// CHECK-NEXT: %[[SIGNALLED:.*]] = moe.ep_signal into(%[[CFLAGS]]) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>}
// CHECK-NEXT: return %[[BACK]], %[[SIGNALLED]], %[[WAITED]]

// CHECK-LABEL: func.func @layer_combine
// CHECK-SAME: (%[[RET:.*]]: tensor<2x4x3x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[CFLAGS:.*]]: tensor<2x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>}, %[[STATUS:[^:]*]]: tensor<2xi32>) -> (tensor<4x64xbf16>, tensor<2xi32>)
// CHECK-NEXT: %[[WAITED:.*]], %[[READY:.*]] = moe.ep_wait %[[CFLAGS]] into(%[[STATUS]]) guards(%[[RET]]) {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 2 : i64}
// CHECK-NEXT: %[[MINE:.*]] = tensor.extract_slice %[[READY]][1, 0, 0, 0] [1, 4, 3, 64] [1, 1, 1, 1] : tensor<2x4x3x64xbf16> to tensor<4x3x64xbf16>
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[MINE]] : (tensor<4x3x64xbf16>) -> tensor<4x64xbf16>
// CHECK-NEXT: return %[[Y]], %[[WAITED]]
// CHECK-NOT: func.func @layer(

// BLOCK16-LABEL: func.func @layer_experts
// BLOCK16: moe.ep_route %{{.*}} {block_m = 16 : i64} : (tensor<5x2xi32>) -> (tensor<115xi32>, tensor<8xi32>, tensor<i32>)
// BLOCK16-NEXT: moe.grouped_matmul {{.*}} {block_m = 16 : i64, num_slots = 1 : i64} {{.*}} -> tensor<115x128xbf16>
// BLOCK16-NEXT: moe.grouped_matmul {{.*}} {block_m = 16 : i64, num_slots = 1 : i64} {{.*}} -> tensor<40x1x64xbf16>
func.func @layer(%x: tensor<4x64xbf16>, %logits: tensor<4x8xf32>,
                 %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>,
                 %bias: tensor<8xf32>) -> tensor<4x64xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 bias(%bias) activation(silu_and_mul)
         {router = #moe.router<scoring = sigmoid, top_k = 2, renormalize = true,
                               num_shared_experts = 1>,
          expert_parallel = #moe.expert_parallel<world = 2, rank = 1>}
       : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<5x256x64xbf16>,
          tensor<5x64x128xbf16>, tensor<8xf32>) -> tensor<4x64xbf16>
  return %y : tensor<4x64xbf16>
}

// -----

// A layer whose result is used by other ops than the return stays whole.
func.func @not_alone(%x: tensor<4x64xbf16>, %logits: tensor<4x8xf32>,
                     %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>)
    -> tensor<4x64xbf16> {
  // expected-error @below {{'moe.fused_moe' op moe-expert-parallel: expects the expert-parallel layer alone in its function (operands its arguments, its result returned), which splits into the phases between the exchanges}}
  %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, num_shared_experts = 1>,
          expert_parallel = #moe.expert_parallel<world = 2, rank = 0>}
       : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<5x256x64xbf16>,
          tensor<5x64x128xbf16>) -> tensor<4x64xbf16>
  %z = arith.addf %y, %x : tensor<4x64xbf16>
  return %z : tensor<4x64xbf16>
}

// -----

// The ranks' T*W = 256 tokens give each of the E + X = 2 experts 256 rows:
// blocks of 128 (T = 128 alone would give 64). L*W*C = 256 receive rows.
// CHECK-LABEL: func.func @busy_experts
// CHECK: moe.ep_route %{{.*}} {block_m = 128 : i64} : (tensor<1x2xi32>) -> (tensor<383xi32>, tensor<3xi32>, tensor<i32>)
func.func @busy(%x: tensor<128x64xbf16>, %logits: tensor<128x2xf32>,
                %w13: tensor<1x256x64xbf16>, %w2: tensor<1x64x128xbf16>)
    -> tensor<128x64xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2>,
          expert_parallel = #moe.expert_parallel<world = 2, rank = 0>}
       : (tensor<128x64xbf16>, tensor<128x2xf32>, tensor<1x256x64xbf16>,
          tensor<1x64x128xbf16>) -> tensor<128x64xbf16>
  return %y : tensor<128x64xbf16>
}
