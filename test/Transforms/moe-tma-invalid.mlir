// moe-tma reports a config whose tiles no TMA descriptor can load (a K tile
// wider than the 128-byte swizzle span) instead of making a malformed map.
// RUN: moe-opt %s --moe-tma --verify-diagnostics

func.func @wide_k_tile(%x: tensor<?x256xbf16>, %w: tensor<4x64x256xbf16>, %s: tensor<?xi32>, %e: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x64xbf16> {
  // expected-error @below {{'moe.grouped_matmul' op moe-tma: expects a swizzle of 0, 32, 64 or 128 bytes, got 256}}
  %o = moe.grouped_matmul %x, %w, %s, %e, %n input(token) output(sorted)
      {block_m = 64, num_slots = 2, config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 128, num_stages = 3>}
    : (tensor<?x256xbf16>, tensor<4x64x256xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<i32>) -> tensor<?x64xbf16>
  return %o : tensor<?x64xbf16>
}
