// The second grouped matmul split over K = 320 (five K tiles in splits of
// 2, 2 and 1): fp32 partial sums per slot, then the routed weight in the
// reduction kernel, stored in slot order. 6 experts, 3 slots, block_m = 64,
// N = 101, f16.
func.func @gemm2(%h: tensor<?x320xf16>, %w2: tensor<6x101x320xf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>, %weights: tensor<?x3xf32>)
    -> tensor<?x3x101xf16> {
  %y = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
         routed_weights(%weights) input(sorted) output(slot)
         {block_m = 64 : i64, num_slots = 3 : i64,
          config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64,
                                    num_stages = 4, split_k = 3, tma_a = true>}
       : (tensor<?x320xf16>, tensor<6x101x320xf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x3xf32>) -> tensor<?x3x101xf16>
  return %y : tensor<?x3x101xf16>
}
