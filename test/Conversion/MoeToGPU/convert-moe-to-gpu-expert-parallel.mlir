// convert-moe-to-gpu compiles the exchange ops of an expert-parallel layer
// (moe-expert-parallel's phases): moe.ep_dispatch to blocks over the parts
// of each region of the ranks' receive buffers, storing through peer tables
// (`peers` launch arguments) and updating its `into` buffers in place (they
// become the results' tensors); moe.ep_route to blocks that scan the local experts'
// padded counts and place each position by binary search over them;
// moe.ep_combine to one warp per receive row, storing through the return
// buffers' peer table; moe.ep_signal to a block of a thread per rank that
// fences and adds one to the rank's counter in each rank's flags at system
// scope; moe.ep_wait to a block of a thread per source that spins on its
// counter in the rank's own flags, bounded, and records a missing source in
// the status, its guarded buffers and the status updated in place.
// RUN: moe-opt %s --split-input-file --convert-moe-to-gpu="tokens-max=4" --canonicalize --cse | FileCheck %s

// Rank 1 of 2, E = 8 routed experts and one shared: L = 5 local experts
// (4 routed), T = 4, S = 3, C = 4; receive buffers of L*W*C = 40 rows.
// CHECK-LABEL: gpu.module @moe_kernels
// The exchange buffers are the caller's slices of rank 1, with the ranks
// whose slices the caller binds.
// CHECK-SAME: buffers = [<input "arg0" : bf16 ["4", "64"]>, <input "arg1" : f32 ["4", "8"]>, <input "arg2" : f32 ["8"]>, <output "result0" : bf16 ["40", "64"] exchange <world = 2, rank = 1>>, <output "result1" : f32 ["40"] exchange <world = 2, rank = 1>>, <output "result2" : i32 ["40"] exchange <world = 2, rank = 1>>, <output "result3" : i32 ["5", "2"] exchange <world = 2, rank = 1>>,
// CHECK: gpu.func @moe_gate_0(
// W*L = 10 regions, a block of 256 threads each (T*S = 12 slots: one part
// of one round); a round's matching slots listed in workgroup memory,
// beside each warp's count of them.
// CHECK: gpu.func @moe_ep_dispatch_1(%[[X:.*]]: memref<4x64xbf16>, %[[IDS:.*]]: memref<4x3xi32>, %[[W:.*]]: memref<4x3xf32>, %[[ROWS:.*]]: !llvm.ptr, %[[WTS:.*]]: !llvm.ptr, %[[SLOTS:.*]]: !llvm.ptr, %[[COUNTS:.*]]: !llvm.ptr, %{{.*}}: i32) workgroup(%[[LIST:.*]] : memref<256xi32, #gpu.address_space<workgroup>> {{.*}}, %[[WARPS:.*]] : memref<8xi32, #gpu.address_space<workgroup>> {{.*}}) kernel
// CHECK-SAME: moe.launch = #moe.launch<grid = ["10", "1", "1"], block = [256, 1, 1], smem = 0, args = ["arg0", "gate_ids", "gate_weights", peers "result0", peers "result1", peers "result2", peers "result3", i32 "T"], dependent = true>
// CHECK: nvvm.griddepcontrol wait
// Region (d, e) = (block / L, block % L); rank d's slices from the tables.
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[BLOCK:.*]] = gpu.block_id x
// CHECK: %[[D:.*]] = arith.divui %[[BLOCK]], %c5
// CHECK: %[[E:.*]] = arith.remui %[[BLOCK]], %c5
// CHECK: %[[D64:.*]] = arith.index_cast %[[D]] : index to i64
// CHECK: %[[ROWS_D:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK: %[[WTS_D:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK: %[[SLOTS_D:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK: %[[COUNTS_D:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
// Its expert: routed d * 4 + e for e < 4, shared 8 + e - 4 on rank 1 only.
// CHECK: %[[ROUTED:.*]] = arith.cmpi slt, %[[EI:.*]], %c4_i32
// CHECK: %[[G_ROUTED:.*]] = arith.addi %{{.*}}, %[[EI]] : i32
// CHECK: %[[G_SHARED:.*]] = arith.addi %[[EI]], %c4_i32 : i32
// CHECK: %[[G:.*]] = arith.select %[[ROUTED]], %[[G_ROUTED]], %[[G_SHARED]]
// CHECK: %[[HERE:.*]] = arith.cmpi eq, %{{.*}}, %c1_i32
// CHECK: %[[RECEIVES:.*]] = arith.ori %[[ROUTED]], %[[HERE]]
// CHECK: %[[EXPERT:.*]] = arith.select %[[RECEIVES]], %[[G]], %c-1_i32
// The slots before the part (none here), summed over the block's warps.
// CHECK: %[[BEFORE_T:.*]] = scf.for %{{.*}} = %[[TID]] to %c0 step %c2048
// CHECK: %[[BEFORE_W:.*]] = nvvm.redux.sync add %[[BEFORE_T]]
// CHECK: memref.store %[[BEFORE_W]], %[[WARPS]]
// CHECK: gpu.barrier
// CHECK: %[[BEFORE:.*]]:2 = scf.for
// CHECK: gpu.barrier
// The round: a slot per thread, the ballot of those routed to the region,
// each warp's count, and the matches listed in slot order after those of
// the warps before.
// CHECK: %[[ID:.*]] = memref.load %[[IDS]]
// CHECK: %[[MATCH:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK: %[[MASK:.*]] = nvvm.vote.sync ballot %c-1_i32, %[[MATCH]] -> i32
// CHECK: %[[COUNT:.*]] = llvm.intr.ctpop(%[[MASK]])
// CHECK: memref.store %[[COUNT]], %[[WARPS]]
// CHECK: gpu.barrier
// CHECK: %[[SUMS:.*]]:2 = scf.for
// CHECK: %[[BELOW:.*]] = llvm.intr.ctpop
// CHECK: %[[LISTED:.*]] = arith.addi %[[SUMS]]#0, %[[BELOW]] : i32
// CHECK: %[[AT:.*]] = arith.index_cast %[[LISTED]] : i32 to index
// CHECK: scf.if %[[MATCH]]
// CHECK: memref.store %{{.*}}, %[[LIST]][%[[AT]]]
// CHECK: gpu.barrier
// The block copies the listed rows 16 bytes a thread (8 bf16 of a token's
// row), eight loads before their stores.
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %[[TID]] to %{{.*}} step %c2048
// CHECK-COUNT-8: vector.load %[[X]][%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<4x64xbf16>, vector<8xbf16>
// Listed row i goes to position before + i while below C = 4: row
// (e * W + 1) * C + position of rank d's slice.
// CHECK: %[[POS:.*]] = arith.addi %[[BEFORE]]#1, %{{.*}} : i32
// CHECK: arith.cmpi slt, %[[POS]], %c4_i32
// CHECK: %[[REG:.*]] = arith.muli %[[E]], %c2
// CHECK: %[[REG1:.*]] = arith.addi %[[REG]], %c1
// CHECK: %[[ROWBASE:.*]] = arith.muli %[[REG1]], %c4
// CHECK: %[[ROW:.*]] = arith.addi %[[ROWBASE]], %{{.*}} : index
// CHECK: llvm.getelementptr %[[ROWS_D]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<8xbf16>, !llvm.ptr
// The thread of the row's first vector stores its weight and slot.
// CHECK: memref.load %[[W]]
// CHECK: llvm.getelementptr %[[WTS_D]]
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK: llvm.getelementptr %[[SLOTS_D]]
// CHECK: llvm.store %{{.*}}, %{{.*}} : i32, !llvm.ptr
// The next round's list waits for the copies.
// CHECK: gpu.barrier
// Then counts[d, e, 1] from thread 0 of the region's last part: every
// region's, 0 included.
// CHECK: %[[TOTAL:.*]] = arith.addi %[[BEFORE]]#1, %[[SUMS]]#1 : i32
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[TID]], %c0 : index
// CHECK: scf.if %[[FIRST]]
// CHECK: llvm.getelementptr %[[COUNTS_D]]
// CHECK: llvm.store %[[TOTAL]], %{{.*}} : i32, !llvm.ptr
// Then the signal: one block of W = 2 threads, thread d adding one to
// element 1 (this rank's counter) of rank d's flags, after a fence.
// CHECK: gpu.func @moe_ep_signal_2(%[[FLAGS:.*]]: !llvm.ptr, %{{.*}}: i32) kernel
// CHECK-SAME: known_block_size = array<i32: 2, 1, 1>
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [2, 1, 1], smem = 0, args = [peers "result4", i32 "T"], dependent = true>
// CHECK: nvvm.griddepcontrol wait
// CHECK: %[[DS:.*]] = gpu.thread_id x
// CHECK: %[[D64:.*]] = arith.index_cast %[[DS]] : index to i64
// CHECK: %[[ENTRY:.*]] = llvm.getelementptr %[[FLAGS]][%[[D64]]] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[SLICE:.*]] = llvm.load %[[ENTRY]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.fence acq_rel
// CHECK: %[[MINE:.*]] = llvm.getelementptr %[[SLICE]][1] : (!llvm.ptr) -> !llvm.ptr, i32
// CHECK: llvm.call_intrinsic "llvm.nvvm.atomic.add.gen.i.sys"(%[[MINE]], %c1_i32) : (!llvm.ptr, i32) -> i32
func.func @layer_dispatch(%arg0: tensor<4x64xbf16>, %arg1: tensor<4x8xf32>,
                          %arg2: tensor<8xf32>,
                          %arg3: tensor<2x40x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg4: tensor<2x40xf32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg5: tensor<2x40xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg6: tensor<2x5x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg7: tensor<2x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>})
    -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>,
        tensor<2x5x2xi32>, tensor<2x2xi32>) {
  %weights, %ids = moe.gate %arg1 bias %arg2
      {router = #moe.router<scoring = sigmoid, top_k = 2, renormalize = true,
                            num_shared_experts = 1>}
    : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x3xf32>, tensor<4x3xi32>)
  %rows, %routed_weights, %slots, %counts = moe.ep_dispatch %arg0, %ids, %weights
      into(%arg3, %arg4, %arg5, %arg6)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>,
       num_experts = 8 : i64}
    : (tensor<4x64xbf16>, tensor<4x3xi32>, tensor<4x3xf32>,
       tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>,
       tensor<2x5x2xi32>)
      -> (tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>,
          tensor<2x5x2xi32>)
  %flags = moe.ep_signal into(%arg7)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>}
    : (tensor<2x2xi32>) -> tensor<2x2xi32>
  return %rows, %routed_weights, %slots, %counts, %flags
    : tensor<2x40x64xbf16>, tensor<2x40xf32>, tensor<2x40xi32>,
      tensor<2x5x2xi32>, tensor<2x2xi32>
}

// -----

// T*S = 900 slots: 4 rounds of 256, a part each, so 4 blocks per region
// (40 in all). Each counts the region's slots before its part, goes over its
// round from there, and only the last part stores the count.
// CHECK-LABEL: gpu.module @moe_kernels
// CHECK: gpu.func @moe_ep_dispatch_0(
// CHECK-SAME: moe.launch = #moe.launch<grid = ["40", "1", "1"], block = [256, 1, 1]
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[BLOCK:.*]] = gpu.block_id x
// CHECK: %[[REGION:.*]] = arith.divui %[[BLOCK]], %c4
// CHECK: %[[PART:.*]] = arith.remui %[[BLOCK]], %c4
// CHECK: %[[E:.*]] = arith.remui %[[REGION]], %c5
// CHECK: %[[NEXT:.*]] = arith.addi %[[PART]], %c1
// CHECK: %[[END:.*]] = arith.minui %[[NEXT]], %c4
// CHECK: %[[FIRST_SLOT:.*]] = arith.muli %[[PART]], %c256
// CHECK: scf.for %{{.*}} = %[[TID]] to %[[FIRST_SLOT]] step %c2048
// CHECK: %[[BEFORE:.*]]:2 = scf.for
// CHECK: %[[SENT:.*]] = scf.for %{{.*}} = %[[PART]] to %[[END]] step %c1 iter_args(%{{.*}} = %[[BEFORE]]#1)
// CHECK: %[[LAST:.*]] = arith.cmpi eq, %[[PART]], %c3
// CHECK: %[[LANE0:.*]] = arith.cmpi eq, %[[TID]], %c0
// CHECK: %[[STORES:.*]] = arith.andi %[[LAST]], %[[LANE0]]
// CHECK: scf.if %[[STORES]]
// CHECK: llvm.store %[[SENT]], %{{.*}} : i32, !llvm.ptr
func.func @dispatch_parts(%arg0: tensor<300x64xbf16>, %ids: tensor<300x3xi32>,
                          %w: tensor<300x3xf32>,
                          %arg3: tensor<2x3000x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg4: tensor<2x3000xf32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg5: tensor<2x3000xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                          %arg6: tensor<2x5x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>})
    -> (tensor<2x3000x64xbf16>, tensor<2x3000xf32>, tensor<2x3000xi32>,
        tensor<2x5x2xi32>) {
  %rows, %routed_weights, %slots, %counts = moe.ep_dispatch %arg0, %ids, %w
      into(%arg3, %arg4, %arg5, %arg6)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>,
       num_experts = 8 : i64}
    : (tensor<300x64xbf16>, tensor<300x3xi32>, tensor<300x3xf32>,
       tensor<2x3000x64xbf16>, tensor<2x3000xf32>, tensor<2x3000xi32>,
       tensor<2x5x2xi32>)
      -> (tensor<2x3000x64xbf16>, tensor<2x3000xf32>, tensor<2x3000xi32>,
          tensor<2x5x2xi32>)
  return %rows, %routed_weights, %slots, %counts
    : tensor<2x3000x64xbf16>, tensor<2x3000xf32>, tensor<2x3000xi32>,
      tensor<2x5x2xi32>
}

// -----

// The receive side of a rank's buffers (L = 5, W = 2, C = 4), as the
// experts phase routes them in blocks of 16 rows (40 + 5*15 = 115
// positions, 8 blocks) and returns its rows.
// CHECK-LABEL: gpu.module @moe_kernels
// CHECK-SAME: buffers = [<input "arg0" : i32 ["5", "2"]>, <input "arg1" : bf16 ["40", "64"]>, <input "arg2" : i32 ["40"]>, <output "result3" : bf16 ["4", "3", "64"] exchange <world = 2, rank = 1>>, <output "result0" : i32 ["115"]>, <output "result1" : i32 ["8"]>, <output "result2" : i32 []>]
// CHECK: gpu.func @moe_ep_route_0(%[[COUNTS:.*]]: memref<5x2xi32>, %[[SORTED:.*]]: memref<115xi32>, %[[EXPERTS:.*]]: memref<8xi32>, %[[PADDED:.*]]: memref<i32>, %{{.*}}: i32) workgroup(%[[ENDS:.*]] : memref<1024xi32, #gpu.address_space<workgroup>>
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [1024, 1, 1], smem = 0, args = ["arg0", "result0", "result1", "result2", i32 "T"], dependent = true>
// CHECK: nvvm.griddepcontrol wait
// Thread e < L: its expert's counts clamped to [0, C] and summed over the
// W regions, padded to 16.
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[IS_EXPERT:.*]] = arith.cmpi ult, %[[TID]], %c5
// CHECK: %[[EXPERT:.*]] = arith.select %[[IS_EXPERT]], %[[TID]], %c0
// CHECK: scf.for
// CHECK: memref.load %[[COUNTS]][%[[EXPERT]], %{{.*}}]
// CHECK: arith.maxsi %{{.*}}, %c0_i32
// CHECK: arith.minsi %{{.*}}, %c4_i32
// CHECK: %[[BLOCKS:.*]] = arith.ceildivui %{{.*}}, %c16_i32
// CHECK: %[[PADDED_ROWS:.*]] = arith.muli %[[BLOCKS]], %c16_i32
// The inclusive scan (shuffles within each warp, then over the warps'
// totals): ends[e] is where expert e's blocks end.
// CHECK: gpu.shuffle up %[[PADDED_ROWS]], %c1_i32, %c32_i32 : i32
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: %[[SUM:.*]] = arith.addi
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: memref.store %[[SUM]], %[[ENDS]][%[[TID]]]
// CHECK-NEXT: gpu.barrier
// CHECK: %[[TOTAL:.*]] = memref.load %[[ENDS]][%c1023]
// CHECK: scf.if
// CHECK-NEXT: memref.store %[[TOTAL]], %[[PADDED]][]
// Each position below the padded count: its expert by binary search (three
// steps over five experts), its row by walking the expert's W counts.
// CHECK: scf.for %[[P:.*]] = %{{.*}} to %c115 step %c1024
// CHECK: %[[P32:.*]] = arith.index_cast %[[P]] : index to i32
// CHECK: %[[USED:.*]] = arith.cmpi slt, %[[P32]], %[[TOTAL]]
// CHECK: scf.if %[[USED]]
// CHECK-COUNT-3: arith.cmpi sgt, %{{.*}}, %[[P32]]
// CHECK: %[[ROW:.*]]:2 = scf.for %{{.*}} = %c0 to %c2 step %c1 iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %c40_i32)
// CHECK: arith.cmpi ult
// CHECK: memref.store %[[ROW]]#1, %[[SORTED]][%[[P]]]
// CHECK: arith.remui %[[P]], %c16
// CHECK: memref.store %{{.*}}, %[[EXPERTS]]
// Past it: the sentinel 40, and -1 for the blocks.
// CHECK: } else {
// CHECK: memref.store %c40_i32, %[[SORTED]][%[[P]]]
// CHECK: memref.store %c-1_i32, %[[EXPERTS]]
// CHECK: gpu.func @moe_ep_combine_1(%[[ROWS:.*]]: memref<40x64xbf16>, %[[SLOTS:.*]]: memref<40xi32>, %[[COUNTS2:.*]]: memref<5x2xi32>, %[[RETURNED:.*]]: !llvm.ptr, %{{.*}}: i32) kernel
// CHECK-SAME: moe.launch = #moe.launch<grid = ["10", "1", "1"], block = [128, 1, 1], smem = 0, args = ["arg1", "arg2", "arg0", peers "result3", i32 "T"], dependent = true>
// CHECK: nvvm.griddepcontrol wait
// A current row with a slot in [0, C*S) goes to its source's slice.
// CHECK: %[[SRC2:.*]] = arith.remui %{{.*}}, %c2
// CHECK: %[[SLOT:.*]] = memref.load %[[SLOTS]]
// CHECK: arith.cmpi slt, %{{.*}}, %c12
// CHECK: scf.if
// CHECK: %[[SRC64:.*]] = arith.index_cast %[[SRC2]] : index to i64
// CHECK: %[[ENTRY:.*]] = llvm.getelementptr %[[RETURNED]][%[[SRC64]]] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[SLICE:.*]] = llvm.load %[[ENTRY]] : !llvm.ptr -> !llvm.ptr
// Row r to element slot * H of the slice.
// CHECK: %[[START:.*]] = arith.muli %{{.*}}, %c64
// CHECK: vector.load %[[ROWS]]
// CHECK: llvm.getelementptr %[[SLICE]]
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<8xbf16>, !llvm.ptr
func.func @receive(%counts: tensor<5x2xi32>, %rows: tensor<40x64xbf16>,
                   %slots: tensor<40xi32>,
                   %returned: tensor<2x4x3x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>})
    -> (tensor<115xi32>, tensor<8xi32>, tensor<i32>, tensor<2x4x3x64xbf16>) {
  %sorted, %experts, %padded = moe.ep_route %counts {block_m = 16}
    : (tensor<5x2xi32>) -> (tensor<115xi32>, tensor<8xi32>, tensor<i32>)
  %back = moe.ep_combine %rows, %slots, %counts into(%returned)
    : (tensor<40x64xbf16>, tensor<40xi32>, tensor<5x2xi32>,
       tensor<2x4x3x64xbf16>) -> tensor<2x4x3x64xbf16>
  return %sorted, %experts, %padded, %back
    : tensor<115xi32>, tensor<8xi32>, tensor<i32>, tensor<2x4x3x64xbf16>
}

// -----

// The combine phase: the wait for every rank's experts phase, then the sum
// of the rank's returned rows, which it guards.
// CHECK-LABEL: gpu.module @moe_kernels
// The status is the caller's plain buffer, updated in place.
// CHECK-SAME: buffers = [<input "arg0" : bf16 ["4", "3", "64"] exchange <world = 2, rank = 1>>, <input "arg1" : i32 ["2"] exchange <world = 2, rank = 1>>, <output "result1" : i32 ["2"]>, <output "result0" : bf16 ["T", "64"]>]
// CHECK: gpu.func @moe_ep_wait_0(%[[FLAGS:.*]]: !llvm.ptr, %[[STATUS:.*]]: memref<2xi32>, %{{.*}}: i32) kernel
// CHECK-SAME: known_block_size = array<i32: 2, 1, 1>
// CHECK-SAME: moe.launch = #moe.launch<grid = ["1", "1", "1"], block = [2, 1, 1], smem = 0, args = [peers "arg1", "result1", i32 "T"], dependent = true>
// CHECK: nvvm.griddepcontrol wait
// The rank's own row of the flags, and its own counter there, the epoch.
// CHECK: %[[ENTRY:.*]] = llvm.getelementptr %[[FLAGS]][1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[ROW:.*]] = llvm.load %[[ENTRY]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[OWN:.*]] = llvm.getelementptr %[[ROW]][1] : (!llvm.ptr) -> !llvm.ptr, i32
// CHECK: %[[EPOCH:.*]] = llvm.load %[[OWN]] atomic acquire {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: %[[S:.*]] = gpu.thread_id x
// CHECK: %[[START:.*]] = nvvm.read.ptx.sreg.globaltimer : i64
// Thread s reads source s's counter until it is not behind, or 10 s passed.
// CHECK: %[[BEHIND:.*]] = scf.while : () -> i1 {
// CHECK: %[[THEIRS:.*]] = llvm.load %{{.*}} atomic acquire {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: %[[AHEAD:.*]] = arith.subi %[[THEIRS]], %[[EPOCH]] : i32
// CHECK: %[[LATE:.*]] = arith.cmpi slt, %[[AHEAD]], %c0_i32 : i32
// CHECK: %[[NOW:.*]] = nvvm.read.ptx.sreg.globaltimer : i64
// CHECK: %[[ELAPSED:.*]] = arith.subi %[[NOW]], %[[START]] : i64
// CHECK: %[[IN_TIME:.*]] = arith.cmpi slt, %[[ELAPSED]], %c10000000000_i64 : i64
// CHECK: %[[SPIN:.*]] = arith.andi %[[LATE]], %[[IN_TIME]] : i1
// CHECK: scf.condition(%[[SPIN]]) %[[LATE]] : i1
// CHECK: } do {
// CHECK: nvvm.nanosleep %c128_i32
// Past the bound: phase 2 claims status[0] unless it holds a failure, and
// the claimant stores s + 1.
// CHECK: scf.if %[[BEHIND]] {
// CHECK: %[[OLD:.*]] = memref.generic_atomic_rmw %[[STATUS]][%c0] : memref<2xi32> {
// CHECK: %[[UNSET:.*]] = arith.cmpi eq, %{{.*}}, %c0_i32 : i32
// CHECK: %[[CLAIM:.*]] = arith.select %[[UNSET]], %c2_i32, %{{.*}} : i32
// CHECK: memref.atomic_yield %[[CLAIM]] : i32
// CHECK: %[[CLAIMED:.*]] = arith.cmpi eq, %[[OLD]], %c0_i32 : i32
// CHECK: scf.if %[[CLAIMED]] {
// CHECK: %[[SOURCE:.*]] = arith.addi %[[S]], %c1 : index
// CHECK: %[[SOURCE32:.*]] = arith.index_cast %[[SOURCE]] : index to i32
// CHECK: memref.store %[[SOURCE32]], %[[STATUS]][%c1] : memref<2xi32>
// The combine reads the guarded return buffer, the rank's slice.
// CHECK: gpu.func @moe_combine_1
// CHECK-SAME: args = ["arg0", "result0", i32 "T"]
func.func @layer_combine(%returned: tensor<2x4x3x64xbf16> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                         %flags: tensor<2x2xi32> {moe.exchange = #moe.expert_parallel<world = 2, rank = 1>},
                         %status: tensor<2xi32>) -> (tensor<4x64xbf16>, tensor<2xi32>) {
  %waited, %ready = moe.ep_wait %flags into(%status) guards(%returned)
      {expert_parallel = #moe.expert_parallel<world = 2, rank = 1>, phase = 2}
    : (tensor<2x2xi32>, tensor<2xi32>, tensor<2x4x3x64xbf16>)
      -> (tensor<2xi32>, tensor<2x4x3x64xbf16>)
  %mine = tensor.extract_slice %ready[1, 0, 0, 0] [1, 4, 3, 64] [1, 1, 1, 1]
    : tensor<2x4x3x64xbf16> to tensor<4x3x64xbf16>
  %y = moe.combine %mine : (tensor<4x3x64xbf16>) -> tensor<4x64xbf16>
  return %y, %waited : tensor<4x64xbf16>, tensor<2xi32>
}
