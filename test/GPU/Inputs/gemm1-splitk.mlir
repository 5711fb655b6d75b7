// The first grouped matmul split over K (three splits of one 64-wide K tile
// each, the last partial): fp32 partial sums per slot, then SiLU-and-mul in
// the reduction kernel into sorted rows. 6 experts, 3 slots, block_m = 16,
// N = 2 * 37, bf16.
func.func @gemm1(%x: tensor<?x136xbf16>, %w13: tensor<6x74x136xbf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>) -> tensor<?x37xbf16> {
  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
         input(token) output(sorted) activation(silu_and_mul)
         {block_m = 16 : i64, num_slots = 3 : i64,
          config = #moe.gemm_config<block_m = 16, block_n = 64, block_k = 64,
                                    num_stages = 3, split_k = 3>}
       : (tensor<?x136xbf16>, tensor<6x74x136xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>) -> tensor<?x37xbf16>
  return %h : tensor<?x37xbf16>
}
