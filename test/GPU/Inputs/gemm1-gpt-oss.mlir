// gpt-oss's first grouped matmul at a reduced size: 32 experts, 4 slots,
// H = 320, I = 160 (2880 / 9 and / 18: gated tiles of 64 output columns
// leave the last one half used), the bias w13_bias [E, 2I] added to each sum
// and the clamped SwiGLU of the released models, bf16.
func.func @gemm1(%x: tensor<?x320xbf16>, %w13: tensor<32x320x320xbf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>, %bias: tensor<32x320xbf16>)
    -> tensor<?x160xbf16> {
  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count bias(%bias)
         input(token) output(sorted) activation(clamped_swiglu)
         {block_m = 64 : i64, num_slots = 4 : i64,
          swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>}
       : (tensor<?x320xbf16>, tensor<32x320x320xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<32x320xbf16>)
         -> tensor<?x160xbf16>
  return %h : tensor<?x160xbf16>
}
