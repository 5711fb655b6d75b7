// One DeepSeek-V3 MoE layer (H = 7168, I = 2048): 256 routed experts in 8
// groups, sigmoid scores with a correction bias, the best 4 groups, top-8,
// renormalised and scaled by 2.5, plus one shared expert fused as expert 256.
// The token count is dynamic.
//
//   moe-opt --moe-decompose examples/deepseek-v3.mlir
func.func @deepseek_v3_moe(%hidden_states: tensor<?x7168xbf16>,
                           %router_logits: tensor<?x256xf32>,
                           %w13: tensor<257x4096x7168xbf16>,
                           %w2: tensor<257x7168x2048xbf16>,
                           %correction_bias: tensor<256xf32>)
    -> tensor<?x7168xbf16> {
  %y = moe.fused_moe %hidden_states, %router_logits, %w13, %w2
         bias(%correction_bias) activation(silu_and_mul)
         {router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8,
                               topk_groups = 4, renormalize = true,
                               routed_scaling_factor = 2.5,
                               num_shared_experts = 1>}
       : (tensor<?x7168xbf16>, tensor<?x256xf32>, tensor<257x4096x7168xbf16>,
          tensor<257x7168x2048xbf16>, tensor<256xf32>) -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}
