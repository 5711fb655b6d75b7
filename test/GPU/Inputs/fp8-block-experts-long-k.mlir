// FP8 experts given routing for the GPU tests (block weight scales,
// token_group activation scales): E=8 H=1024 I=1024, 2 slots: 8 K tiles of 128 in both GEMMs, enough to split along K (stream-K).
func.func @experts(%x: tensor<?x1024xbf16>, %ids: tensor<?x2xi32>,
                   %w: tensor<?x2xf32>, %w13: tensor<8x2048x1024xf8E4M3FN>,
                   %w2: tensor<8x1024x1024xf8E4M3FN>, %s13: tensor<8x16x8xf32>,
                   %s2: tensor<8x8x8xf32>) -> tensor<?x1024xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul)
         {quantization = #moe.quantization<weights = block, activations = token_group>}
       : (tensor<?x1024xbf16>, tensor<?x2xi32>, tensor<?x2xf32>,
          tensor<8x2048x1024xf8E4M3FN>, tensor<8x1024x1024xf8E4M3FN>,
          tensor<8x16x8xf32>, tensor<8x8x8xf32>) -> tensor<?x1024xbf16>
  return %y : tensor<?x1024xbf16>
}
