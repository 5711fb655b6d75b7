// Routing with 512 experts in 16 groups (keep 4), softmax, top-10,
// renormalised and scaled, two fused shared experts, bf16 logits, fp32 rows.
func.func @routing(%logits: tensor<?x512xbf16>, %rows: tensor<?x12x32xf32>)
    -> (tensor<?x12xf32>, tensor<?x12xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x32xf32>) {
  %w, %ids = moe.gate %logits {router = #moe.router<scoring = softmax, top_k = 10, num_groups = 16, topk_groups = 4, renormalize = true, routed_scaling_factor = 1.5, num_shared_experts = 2>}
    : (tensor<?x512xbf16>) -> (tensor<?x12xf32>, tensor<?x12xi32>)
  %s, %e, %n = moe.route %ids {num_experts = 514, block_m = 128} : (tensor<?x12xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  %y = moe.combine %rows : (tensor<?x12x32xf32>) -> tensor<?x32xf32>
  return %w, %ids, %s, %e, %n, %y : tensor<?x12xf32>, tensor<?x12xi32>, tensor<?xi32>, tensor<?xi32>, tensor<i32>, tensor<?x32xf32>
}
