// moe-tile takes a grouped matmul's config from the tuned database when it
// has an entry for the op's E, N, K, dtype (with fp8, its scaling) and
// device (the bucket nearest `tokens` by ratio), marks the op moe.tuned so
// that moe-split-k keeps the tuned split_k, takes the heuristic's where that
// bucket's entry says the heuristic measured fastest, and otherwise falls
// back to the heuristic with one warning per shape.
// RUN: moe-opt %s --moe-tile="config-db=%S/Inputs/gemm-configs.json tokens=1" --moe-split-k="tokens=1" 2>&1 | FileCheck %s --check-prefix=DECODE
// RUN: moe-opt %s --moe-tile="config-db=%S/Inputs/gemm-configs.json tokens=16" 2>&1 | FileCheck %s --check-prefix=NEAR
// RUN: moe-opt %s --moe-tile="config-db=%S/Inputs/gemm-configs.json device='NVIDIA H200' tokens=1000" 2>&1 | FileCheck %s --check-prefix=H200
// RUN: moe-opt %s --moe-tile="config-db=%S/Inputs/gemm-configs.json tokens=2048" 2>&1 | FileCheck %s --check-prefix=HEURISTIC

// The E=4 N=128 K=128 bf16 gemm at 1 token: the tokens=1 entry, split_k
// kept, the producer it leaves out the heuristic's (64-column decode tiles
// have one); the two f16 gemms of one shape (no entry) get the heuristic (its
// three-stage decode ring) and one warning between them. The block-scaled fp8 entry is not the
// channel-scaled gemm's.
// DECODE: moe-tile-config-db.mlir:[[@LINE+34]]:8: warning: moe-tile: no tuned config for E=4 N=96 K=64 f16 block_m=16 on 'NVIDIA H100 80GB HBM3' near 1 tokens: using the heuristic's #moe.gemm_config<block_m = 16, block_n = 128, block_k = 64, num_stages = 3, tma_a = true>
// DECODE: moe-tile-config-db.mlir:[[@LINE+41]]:8: warning: moe-tile: no tuned config for E=4 N=128 K=256 f8E4M3FN quantization=channel block_m=16 on 'NVIDIA H100 80GB HBM3' near 1 tokens
// DECODE-NOT: warning
// DECODE-LABEL: func.func @gemms
// DECODE: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64, num_stages = 6, split_k = 2, warp_specialized = true>, moe.tuned, num_slots = 2 : i64}
// DECODE: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 64, num_stages = 3, tma_a = true>, num_slots = 2 : i64}
// DECODE: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 64, num_stages = 3, tma_a = true>, num_slots = 2 : i64}
// fp8 weights have entries of their own (dtype f8E4M3FN), per scaling.
// DECODE: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 128, num_stages = 3, tma_a = true, warp_specialized = true>, moe.tuned, num_slots = 2 : i64
// (The channel-scaled one has none: the heuristic's three-stage decode ring.)
// DECODE: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 128, num_stages = 3, tma_a = true>, num_slots = 2 : i64

// 16 tokens are 2 octaves from the 64-token bucket and 4 from the 1-token one.
// NEAR: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 128, block_k = 64, num_stages = 5, persistent = true, warp_specialized = true>, moe.tuned, num_slots = 2 : i64}

// 2048 tokens are nearest the 4096-token bucket, where the heuristic measured
// fastest: the heuristic's config, not marked moe.tuned (moe-split-k may
// split it) and without the warning, rather than the 64-token bucket's entry.
// HEURISTIC-NOT: warning: moe-tile: no tuned config for E=4 N=128 K=128
// HEURISTIC-LABEL: func.func @gemms
// HEURISTIC: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 256, block_k = 64, num_stages = 4, persistent = true, warp_specialized = true>, num_slots = 2 : i64}

// Another device has its own entries; the fields one leaves out keep the
// heuristic's (at 1000 tokens, a producer warpgroup for the gathering gemm).
// H200: moe.grouped_matmul {{.*}}config = #moe.gemm_config<block_m = 16, block_n = 32, block_k = 64, num_stages = 8, warp_specialized = true>, moe.tuned, num_slots = 2 : i64}

func.func @gemms(%x: tensor<?x128xbf16>, %w13: tensor<4x128x128xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>,
                 %g: tensor<?x64xf16>, %w3: tensor<4x96x64xf16>,
                 %q: tensor<?x256xf8E4M3FN>, %w8: tensor<4x128x256xf8E4M3FN>,
                 %qs: tensor<?x2xf32>, %ws: tensor<4x1x2xf32>,
                 %rs: tensor<?x1xf32>, %cs: tensor<4x128xf32>)
    -> (tensor<?x64xbf16>, tensor<?x96xf16>, tensor<?x96xf16>, tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %up = moe.grouped_matmul %x, %w13, %s, %e, %n input(token) output(sorted) activation(silu_and_mul) {block_m = 16, num_slots = 2}
    : (tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  %a = moe.grouped_matmul %g, %w3, %s, %e, %n input(sorted) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<?x64xf16>, tensor<4x96x64xf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x96xf16>
  // The same shape again: no second warning.
  %b = moe.grouped_matmul %g, %w3, %s, %e, %n input(sorted) output(sorted) {block_m = 16, num_slots = 2}
    : (tensor<?x64xf16>, tensor<4x96x64xf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x96xf16>
  %f = moe.grouped_matmul %q, %w8, %s, %e, %n scales(%qs, %ws) input(sorted) output(sorted)
    {block_m = 16, num_slots = 2, quantization = #moe.quantization<weights = block, activations = token_group>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x128x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x2xf32>, tensor<4x1x2xf32>) -> tensor<?x128xbf16>
  %c = moe.grouped_matmul %q, %w8, %s, %e, %n scales(%rs, %cs) input(sorted) output(sorted)
    {block_m = 16, num_slots = 2, quantization = #moe.quantization<weights = channel, activations = token>}
    : (tensor<?x256xf8E4M3FN>, tensor<4x128x256xf8E4M3FN>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x1xf32>, tensor<4x128xf32>) -> tensor<?x128xbf16>
  return %up, %a, %b, %f, %c : tensor<?x64xbf16>, tensor<?x96xf16>, tensor<?x96xf16>, tensor<?x128xbf16>, tensor<?x128xbf16>
}
