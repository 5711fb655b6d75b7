// MXFP4 experts given routing for the GPU tests (e2m1 weights packed two
// per byte, an e8m0 scale per 32 values of K; bf16 activations): E=8 H=256
// I=192, 4 slots.
func.func @experts(%x: tensor<?x256xbf16>, %ids: tensor<?x4xi32>,
                   %w: tensor<?x4xf32>, %w13: tensor<8x384x128xi8>,
                   %w2: tensor<8x256x96xi8>, %s13: tensor<8x384x8xf8E8M0FNU>,
                   %s2: tensor<8x256x6xf8E8M0FNU>) -> tensor<?x256xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul)
         {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x256xbf16>, tensor<?x4xi32>, tensor<?x4xf32>,
          tensor<8x384x128xi8>, tensor<8x256x96xi8>,
          tensor<8x384x8xf8E8M0FNU>, tensor<8x256x6xf8E8M0FNU>)
         -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
