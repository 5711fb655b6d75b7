// moe-tile on MXFP4 grouped matmuls (gpt-oss-20b's first GEMM): a
// warp-specialized config, since the producer warpgroup decodes the packed
// weights; K tiles of 64 bf16 values (the decoded tiles' 128-byte swizzle);
// 64 accumulator columns while the weights stream at a row per expert (T =
// 1 here: 4 slots over 32 experts), 128 from there on, never 256.
// RUN: moe-opt %s --moe-tile="tokens=1" 2>/dev/null | FileCheck %s --check-prefix=DECODE
// RUN: moe-opt %s --moe-tile="tokens=16" 2>/dev/null | FileCheck %s --check-prefix=MID
// RUN: moe-opt %s --moe-tile="tokens=4096" 2>/dev/null | FileCheck %s --check-prefix=PREFILL

// DECODE: config = #moe.gemm_config<block_m = 64, block_n = 64, block_k = 64, num_stages = 4, warp_specialized = true>
// MID: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, warp_specialized = true>
// PREFILL: config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64, num_stages = 4, warp_specialized = true>
func.func @gemm1(%x: tensor<?x2880xbf16>, %w: tensor<32x5760x1440xi8>,
                 %s: tensor<32x5760x90xf8E8M0FNU>, %sorted: tensor<?xi32>,
                 %experts: tensor<?xi32>, %n: tensor<i32>) -> tensor<?x2880xbf16> {
  %h = moe.grouped_matmul %x, %w, %sorted, %experts, %n weight_scales(%s)
         input(token) output(sorted) activation(silu_and_mul)
         {block_m = 64, num_slots = 4,
          quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x2880xbf16>, tensor<32x5760x1440xi8>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<32x5760x90xf8E8M0FNU>)
         -> tensor<?x2880xbf16>
  return %h : tensor<?x2880xbf16>
}
