// FP8 experts given routing for the GPU tests (tensor weight scales, static
// per-tensor activation scales, as FP8 Mixtral checkpoints have them):
// E=8 H=384 I=128, 2 slots.
func.func @experts(%x: tensor<?x384xbf16>, %ids: tensor<?x2xi32>,
                   %w: tensor<?x2xf32>, %w13: tensor<8x256x384xf8E4M3FN>,
                   %w2: tensor<8x384x128xf8E4M3FN>, %s13: tensor<8xf32>,
                   %s2: tensor<8xf32>, %a13: tensor<1xf32>,
                   %a2: tensor<1xf32>) -> tensor<?x384xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(silu_and_mul)
         {quantization = #moe.quantization<weights = tensor, activations = static_tensor>}
       : (tensor<?x384xbf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x256x384xf8E4M3FN>, tensor<8x384x128xf8E4M3FN>,
          tensor<8xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>)
       -> tensor<?x384xbf16>
  return %y : tensor<?x384xbf16>
}
