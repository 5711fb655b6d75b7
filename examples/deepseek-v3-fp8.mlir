// One DeepSeek-V3 MoE layer with FP8 weights as its checkpoints ship them
// (e4m3 with one fp32 scale per 128x128 block, `weight_scale_inv`; the
// activations quantized at run time per token and 128 columns), its routing
// unchanged (256 routed experts in 8 groups, sigmoid scores with a
// correction bias, the best 4 groups, top-8, renormalised and scaled by 2.5,
// one shared expert as expert 256) and its sizes reduced 16x so that the CPU
// path runs it in seconds: H = 448 (three whole 128-column blocks and a
// 64-column tail), I = 128. The full layer has H = 7168 and I = 2048, scales
// [257, 32, 56] and [257, 56, 16].
//
//   moe-opt --moe-decompose examples/deepseek-v3-fp8.mlir
//   moe-run examples/deepseek-v3-fp8.mlir --tokens 16 --device cpu
func.func @deepseek_v3_fp8_moe(%hidden_states: tensor<?x448xbf16>,
                               %router_logits: tensor<?x256xf32>,
                               %w13: tensor<257x256x448xf8E4M3FN>,
                               %w2: tensor<257x448x128xf8E4M3FN>,
                               %correction_bias: tensor<256xf32>,
                               %w13_scale_inv: tensor<257x2x4xf32>,
                               %w2_scale_inv: tensor<257x4x1xf32>)
    -> tensor<?x448xbf16> {
  %y = moe.fused_moe %hidden_states, %router_logits, %w13, %w2
         bias(%correction_bias) scales(%w13_scale_inv, %w2_scale_inv)
         activation(silu_and_mul)
         {router = #moe.router<scoring = sigmoid, top_k = 8, num_groups = 8,
                               topk_groups = 4, renormalize = true,
                               routed_scaling_factor = 2.5,
                               num_shared_experts = 1>,
          quantization = #moe.quantization<weights = block,
                                           activations = token_group,
                                           block_size = 128>}
       : (tensor<?x448xbf16>, tensor<?x256xf32>, tensor<257x256x448xf8E4M3FN>,
          tensor<257x448x128xf8E4M3FN>, tensor<256xf32>, tensor<257x2x4xf32>,
          tensor<257x4x1xf32>) -> tensor<?x448xbf16>
  return %y : tensor<?x448xbf16>
}
