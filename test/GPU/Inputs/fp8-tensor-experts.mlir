// FP8 experts given routing for the GPU tests (tensor weight scales,
// token activation scales): E=8 H=256 I=256, 2 slots.
func.func @experts(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>,
                   %w: tensor<?x2xf32>, %w13: tensor<8x512x256xf8E4M3FN>,
                   %w2: tensor<8x256x256xf8E4M3FN>, %s13: tensor<8xf32>,
                   %s2: tensor<8xf32>) -> tensor<?x256xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul)
         {quantization = #moe.quantization<weights = tensor, activations = token>}
       : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x512x256xf8E4M3FN>, tensor<8x256x256xf8E4M3FN>,
          tensor<8xf32>, tensor<8xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
