// gpt-oss's second grouped matmul at a reduced size: 32 experts, 4 slots,
// K = I = 160, N = H = 320, the bias w2_bias [E, H] added to each sum before
// the routed weight, bf16, in slot order.
func.func @gemm2(%h: tensor<?x160xbf16>, %w2: tensor<32x320x160xbf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>, %weights: tensor<?x4xf32>,
                 %bias: tensor<32x320xbf16>) -> tensor<?x4x320xbf16> {
  %y = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
         routed_weights(%weights) bias(%bias) input(sorted) output(slot)
         {block_m = 64 : i64, num_slots = 4 : i64}
       : (tensor<?x160xbf16>, tensor<32x320x160xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x4xf32>, tensor<32x320xbf16>)
         -> tensor<?x4x320xbf16>
  return %y : tensor<?x4x320xbf16>
}
