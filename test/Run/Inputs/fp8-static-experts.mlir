// Experts given routing with fp8 weights scaled per output channel and
// static activation scales (one per GEMM input, as FP8 checkpoints with
// activation_scheme: static ship them); bf16 hidden states, 6 experts, 3
// slots.
func.func @experts(%x: tensor<?x96xbf16>, %ids: tensor<?x3xi32>,
                   %w: tensor<?x3xf32>, %w13: tensor<6x64x96xf8E4M3FN>,
                   %w2: tensor<6x96x32xf8E4M3FN>, %s13: tensor<6x64xf32>,
                   %s2: tensor<6x96xf32>, %a13: tensor<1xf32>,
                   %a2: tensor<1xf32>) -> tensor<?x96xbf16> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 scales(%s13, %s2)
         input_scales(%a13, %a2) activation(silu_and_mul)
         {quantization = #moe.quantization<weights = channel, activations = static_tensor>}
       : (tensor<?x96xbf16>, tensor<?x3xi32>, tensor<?x3xf32>,
          tensor<6x64x96xf8E4M3FN>, tensor<6x96x32xf8E4M3FN>,
          tensor<6x64xf32>, tensor<6x96xf32>, tensor<1xf32>, tensor<1xf32>)
       -> tensor<?x96xbf16>
  return %y : tensor<?x96xbf16>
}
