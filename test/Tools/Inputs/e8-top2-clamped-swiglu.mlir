// A gpt-oss-style layer (the experts' biases, the clamped SwiGLU) small
// enough to compile fast, for test/Tools/moe-tune.py.
func.func @layer(%x: tensor<?x128xbf16>, %logits: tensor<?x8xf32>,
                 %w13: tensor<8x256x128xbf16>, %w2: tensor<8x128x128xbf16>,
                 %b13: tensor<8x256xbf16>, %b2: tensor<8x128xbf16>)
    -> tensor<?x128xbf16> {
  %0 = moe.fused_moe %x, %logits, %w13, %w2 biases(%b13, %b2)
      activation(clamped_swiglu)
      {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
       swiglu = #moe.swiglu<alpha = 1.702000e+00, limit = 7.000000e+00>}
      : (tensor<?x128xbf16>, tensor<?x8xf32>, tensor<8x256x128xbf16>,
         tensor<8x128x128xbf16>, tensor<8x256xbf16>, tensor<8x128xbf16>)
      -> tensor<?x128xbf16>
  return %0 : tensor<?x128xbf16>
}
