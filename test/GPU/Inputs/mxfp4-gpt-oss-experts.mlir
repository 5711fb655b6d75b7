// MXFP4 experts of gpt-oss-20b's size given routing, for the GPU tests:
// E=32 H=I=2880 (45 K tiles; the second GEMM's last 128-column tile is
// ragged), 4 slots, SiLU-and-mul.
func.func @experts(%x: tensor<?x2880xbf16>, %ids: tensor<?x4xi32>,
                   %w: tensor<?x4xf32>, %w13: tensor<32x5760x1440xi8>,
                   %w2: tensor<32x2880x1440xi8>,
                   %s13: tensor<32x5760x90xf8E8M0FNU>,
                   %s2: tensor<32x2880x90xf8E8M0FNU>) -> tensor<?x2880xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         activation(silu_and_mul)
         {quantization = #moe.quantization<weights = mxfp4, activations = none, block_size = 32>}
       : (tensor<?x2880xbf16>, tensor<?x4xi32>, tensor<?x4xf32>,
          tensor<32x5760x1440xi8>, tensor<32x2880x1440xi8>,
          tensor<32x5760x90xf8E8M0FNU>, tensor<32x2880x90xf8E8M0FNU>)
         -> tensor<?x2880xbf16>
  return %y : tensor<?x2880xbf16>
}
