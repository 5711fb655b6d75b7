// Routing with 192 experts in 64 groups of 3 (keep 10), sigmoid + bias,
// top-8, renormalised, bf16 rows: more groups than a warp has lanes, so the
// gate ranks two groups a lane and keeps them in two masks, and groups that
// do not align with the lanes' experts.
func.func @routing(%logits: tensor<?x192xf32>, %bias: tensor<192xf32>, %rows: tensor<?x8x64xbf16>)
    -> (tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x64xbf16>) {
  %w, %ids = moe.gate %logits bias %bias {router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 64, topk_groups = 10, renormalize = true>}
    : (tensor<?x192xf32>, tensor<192xf32>) -> (tensor<?x8xf32>, tensor<?x8xi32>)
  %s, %e, %n = moe.route %ids {num_experts = 192, block_m = 16} : (tensor<?x8xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %y = moe.combine %rows : (tensor<?x8x64xbf16>) -> tensor<?x64xbf16>
  return %w, %ids, %s, %e, %n, %y : tensor<?x8xf32>, tensor<?x8xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x64xbf16>
}
