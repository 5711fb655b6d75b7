// With no config-db, moe-tile takes the shipped entries
// (configs/gemm-configs.json, compiled in): DeepSeek-V3's first grouped
// matmul on the H100 at 1 token and at 4096 tokens gets the tuned configs,
// marked moe.tuned, without a warning; another device has no entries and
// gets the heuristic, with one (at 1 token the tuned config's three-stage
// ring, unmarked); a shipped entry that names the heuristic gives it; and
// Mixtral-8x7B's second grouped matmul gets its stream-K entries.
// RUN: moe-opt %s --moe-tile="tokens=1" 2>&1 | FileCheck %s --check-prefix=DECODE
// RUN: moe-opt %s --moe-tile="tokens=4096" 2>&1 | FileCheck %s --check-prefix=PREFILL
// RUN: moe-opt %s --moe-tile="tokens=1 device='NVIDIA H20'" 2>&1 | FileCheck %s --check-prefix=OTHER
// RUN: moe-opt %s --moe-tile="tokens=2048" 2>&1 | FileCheck %s --check-prefix=HEURISTIC
// RUN: moe-opt %s --moe-tile="tokens=1024" 2>&1 | FileCheck %s --check-prefix=STREAM

// DECODE-NOT: warning
// DECODE: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 3>, moe.tuned
// PREFILL-NOT: warning
// PREFILL: config = #moe.gemm_config<block_m = 64, block_n = 256, block_k = 64, num_stages = 4, warp_specialized = true>, moe.tuned
// OTHER: warning: moe-tile: no tuned config for E=257 N=4096 K=7168 bf16 block_m=64 on 'NVIDIA H20' near 1 tokens
// OTHER: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 3>, num_slots
// The shape of gpt-oss-20b's first grouped matmul at 2048 tokens (128-row
// blocks; the key has no activation): the shipped entry names the heuristic (moe-tune measured it fastest there), so
// it gets the heuristic's config, unmarked and without a warning, not the
// 1024 bucket's tuned one.
// HEURISTIC-NOT: warning
// HEURISTIC-LABEL: func.func @gpt_oss_20b_up
// HEURISTIC: config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, persistent = true, warp_specialized = true>, num_slots = 4
func.func @gpt_oss_20b_up(%x: tensor<?x2880xbf16>, %w13: tensor<32x5760x2880xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x2880xbf16> {
  %h = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 128, num_slots = 4}
    : (tensor<?x2880xbf16>, tensor<32x5760x2880xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x2880xbf16>
  return %h : tensor<?x2880xbf16>
}

func.func @deepseek_up(%x: tensor<?x7168xbf16>, %w13: tensor<257x4096x7168xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x2048xbf16> {
  %h = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 64, num_slots = 9}
    : (tensor<?x7168xbf16>, tensor<257x4096x7168xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x2048xbf16>
  return %h : tensor<?x2048xbf16>
}

// Mixtral-8x7B's second grouped matmul in 128-row blocks takes the shipped
// stream-K persistent grid at 1024 and 2048 tokens, and a plain grid at
// 4096 (PREFILL).
// STREAM-LABEL: func.func @mixtral_down
// STREAM: config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true, persistent = true, stream_k = true>, moe.tuned
// HEURISTIC-LABEL: func.func @mixtral_down
// HEURISTIC: persistent = true, stream_k = true>, moe.tuned
// PREFILL-LABEL: func.func @mixtral_down
// PREFILL: config = #moe.gemm_config<block_m = 128, block_n = 256, block_k = 64, num_stages = 4, num_warpgroups = 2, tma_a = true>, moe.tuned
func.func @mixtral_down(%h: tensor<?x14336xbf16>, %w2: tensor<8x4096x14336xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>, %rw: tensor<?x2xf32>) -> tensor<?x2x4096xbf16> {
  %y = moe.grouped_matmul %h, %w2, %s, %e, %n routed_weights(%rw) input(sorted) output(slot) {block_m = 128, num_slots = 2}
    : (tensor<?x14336xbf16>, tensor<8x4096x14336xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>) -> tensor<?x2x4096xbf16>
  return %y : tensor<?x2x4096xbf16>
}
