// A layer no preset has, for bench/variants_bench.py: DeepSeek-V3's sizes
// (H = 7168, I = 2048) and grouped sigmoid router with a correction bias,
// 256 routed experts, top-8, and no shared expert.
func.func @e256_top8_no_shared(%hidden_states: tensor<?x7168xbf16>,
                               %router_logits: tensor<?x256xf32>,
                               %w13: tensor<256x4096x7168xbf16>,
                               %w2: tensor<256x7168x2048xbf16>,
                               %correction_bias: tensor<256xf32>)
    -> tensor<?x7168xbf16> {
  %y = moe.fused_moe %hidden_states, %router_logits, %w13, %w2
         bias(%correction_bias) activation(silu_and_mul)
         {router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8,
                               topk_groups = 4, renormalize = true,
                               routed_scaling_factor = 2.5>}
       : (tensor<?x7168xbf16>, tensor<?x256xf32>, tensor<256x4096x7168xbf16>,
          tensor<256x7168x2048xbf16>, tensor<256xf32>) -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}
