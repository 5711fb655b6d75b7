// The second grouped matmul with tails for the tensor-core kernel: K = 72
// (a partial second K tile), N = 101 (odd: single-column stores), 6
// experts, 3 slots, block_m = 128 (two wgmma row blocks per routing block),
// f16. Each row times its routed weight, stored in slot order.
func.func @gemm2(%h: tensor<?x72xf16>, %w2: tensor<6x101x72xf16>,
                 %sorted: tensor<?xi32>, %experts: tensor<?xi32>,
                 %count: tensor<i32>, %weights: tensor<?x3xf32>)
    -> tensor<?x3x101xf16> {
  %y = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
         routed_weights(%weights) input(sorted) output(slot)
         {block_m = 128 : i64, num_slots = 3 : i64}
       : (tensor<?x72xf16>, tensor<6x101x72xf16>, tensor<?xi32>,
          tensor<?xi32>, tensor<i32>, tensor<?x3xf32>) -> tensor<?x3x101xf16>
  return %y : tensor<?x3x101xf16>
}
