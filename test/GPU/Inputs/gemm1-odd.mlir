// The first grouped matmul of a layer with awkward sizes: K = 100 and
// N = 2 * 37 (neither a multiple of 16), 6 experts, 3 slots, block_m = 16,
// f16. SiLU(gate) * up in fp32, rows in sorted (expert-grouped) order.
func.func @gemm1(%x: tensor<?x100xf16>, %w13: tensor<6x74x100xf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>) -> tensor<?x37xf16> {
  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
         input(token) output(sorted) activation(silu_and_mul)
         {block_m = 16 : i64, num_slots = 3 : i64}
       : (tensor<?x100xf16>, tensor<6x74x100xf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>) -> tensor<?x37xf16>
  return %h : tensor<?x37xf16>
}
