// The experts of one Qwen3-30B-A3B MoE layer (H = 2048, I = 768, 128
// experts, 8 per token) given routing already computed, as serving engines
// and Hugging Face's experts interface call them: ids [T, 8] (an id outside
// [0, 128) contributes nothing) and their weights [T, 8]. The token count is
// dynamic.
//
//   moe-opt --moe-decompose examples/qwen3-30b-a3b-experts.mlir
//   moe-compile examples/qwen3-30b-a3b-experts.mlir -o qwen3-experts.moeb
func.func @qwen3_30b_a3b_experts(%hidden_states: tensor<?x2048xbf16>,
                                 %topk_ids: tensor<?x8xi32>,
                                 %topk_weights: tensor<?x8xf32>,
                                 %w13: tensor<128x1536x2048xbf16>,
                                 %w2: tensor<128x2048x768xbf16>)
    -> tensor<?x2048xbf16> {
  %y = moe.fused_experts %hidden_states, %topk_ids, %topk_weights, %w13, %w2
         activation(silu_and_mul)
       : (tensor<?x2048xbf16>, tensor<?x8xi32>, tensor<?x8xf32>,
          tensor<128x1536x2048xbf16>, tensor<128x2048x768xbf16>)
         -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
