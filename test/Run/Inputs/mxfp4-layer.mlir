// A gpt-oss-like layer with MXFP4 weights for moe-run: E=8, top-4, H=64,
// I=96 (three MX blocks), expert biases, the clamped SwiGLU.
func.func @layer(%x: tensor<?x64xbf16>, %logits: tensor<?x8xf32>,
                 %w13: tensor<8x192x32xi8>, %w2: tensor<8x64x48xi8>,
                 %b13: tensor<8x192xbf16>, %b2: tensor<8x64xbf16>,
                 %s13: tensor<8x192x2xf8E8M0FNU>,
                 %s2: tensor<8x64x3xf8E8M0FNU>) -> tensor<?x64xbf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 biases(%b13, %b2) scales(%s13, %s2)
         activation(clamped_swiglu) {
         router = #moe.router<scoring = softmax, top_k = 4, renormalize = true>,
         swiglu = #moe.swiglu<alpha = 1.702, limit = 7.0>,
         quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x192x32xi8>,
          tensor<8x64x48xi8>, tensor<8x192xbf16>, tensor<8x64xbf16>,
          tensor<8x192x2xf8E8M0FNU>, tensor<8x64x3xf8E8M0FNU>)
         -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
