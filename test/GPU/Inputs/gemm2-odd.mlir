// The second grouped matmul of a layer with awkward sizes: K = 37 and
// N = 100 (neither a multiple of 16), 6 experts, 3 slots, block_m = 16, f16.
// Each row times its routed weight, stored in slot order.
func.func @gemm2(%h: tensor<?x37xf16>, %w2: tensor<6x100x37xf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>, %weights: tensor<?x3xf32>)
    -> tensor<?x3x100xf16> {
  %y = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
         routed_weights(%weights) input(sorted) output(slot)
         {block_m = 16 : i64, num_slots = 3 : i64}
       : (tensor<?x37xf16>, tensor<6x100x37xf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x3xf32>) -> tensor<?x3x100xf16>
  return %y : tensor<?x3x100xf16>
}
