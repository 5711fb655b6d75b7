// An fp8 layer with static per-tensor activation scales, which no layer
// description (dynamic activation scales) stands for: E=4 H=128 I=64, top-2.
func.func @layer(%x: tensor<?x128xbf16>, %logits: tensor<?x4xf32>,
                 %w13: tensor<4x128x128xf8E4M3FN>,
                 %w2: tensor<4x128x64xf8E4M3FN>, %s13: tensor<4xf32>,
                 %s2: tensor<4xf32>, %a13: tensor<1xf32>,
                 %a2: tensor<1xf32>) -> tensor<?x128xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2>,
          quantization = #moe.quantization<weights = tensor,
                                           activations = static_tensor>}
       : (tensor<?x128xbf16>, tensor<?x4xf32>, tensor<4x128x128xf8E4M3FN>,
          tensor<4x128x64xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>,
          tensor<1xf32>, tensor<1xf32>) -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}
