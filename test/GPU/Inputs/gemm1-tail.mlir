// The first grouped matmul with tails for the tensor-core kernel: K = 136
// (two 64-wide K tiles and a partial one), N = 2 * 37 (the gate tile reaches
// into the up half, the output columns are odd), 6 experts, 3 slots,
// block_m = 16 (a wgmma's 64 rows span four routing blocks), bf16.
func.func @gemm1(%x: tensor<?x136xbf16>, %w13: tensor<6x74x136xbf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>) -> tensor<?x37xbf16> {
  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
         input(token) output(sorted) activation(silu_and_mul)
         {block_m = 16 : i64, num_slots = 3 : i64}
       : (tensor<?x136xbf16>, tensor<6x74x136xbf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>) -> tensor<?x37xbf16>
  return %h : tensor<?x37xbf16>
}
