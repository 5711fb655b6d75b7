// Routing with 64 experts in 4 groups (keep 2), sigmoid + bias, top-6, no
// renormalisation, fp16 rows.
func.func @routing(%logits: tensor<?x64xf32>, %bias: tensor<64xf32>, %rows: tensor<?x6x64xf16>)
    -> (tensor<?x6xf32>, tensor<?x6xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x64xf16>) {
  %w, %ids = moe.gate %logits bias %bias {router = #moe.router<scoring = sigmoid, top_k = 6, num_groups = 4, topk_groups = 2>}
    : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x6xf32>, tensor<?x6xi32>)
  %s, %e, %n = moe.route %ids {num_experts = 64, block_m = 16} : (tensor<?x6xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %y = moe.combine %rows : (tensor<?x6x64xf16>) -> tensor<?x64xf16>
  return %w, %ids, %s, %e, %n, %y : tensor<?x6xf32>, tensor<?x6xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x64xf16>
}
