// FP8 experts given routing for the GPU tests (block weight scales,
// token_group activation scales): E=16 H=384 I=192, 4 slots.
func.func @experts(%x: tensor<?x384xbf16>, %ids: tensor<?x4xi32>,
                   %w: tensor<?x4xf32>, %w13: tensor<16x384x384xf8E4M3FN>,
                   %w2: tensor<16x384x192xf8E4M3FN>, %s13: tensor<16x3x3xf32>,
                   %s2: tensor<16x3x2xf32>) -> tensor<?x384xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul)
         {quantization = #moe.quantization<weights = block, activations = token_group>}
       : (tensor<?x384xbf16>, tensor<?x4xi32>, tensor<?x4xf32>,
          tensor<16x384x384xf8E4M3FN>, tensor<16x384x192xf8E4M3FN>,
          tensor<16x3x3xf32>, tensor<16x3x2xf32>) -> tensor<?x384xbf16>
  return %y : tensor<?x384xbf16>
}
