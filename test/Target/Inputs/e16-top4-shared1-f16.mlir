// A layer no preset has, for moe-compile --describe and --part of a file: 16
// routed experts, softmax top-4 and one shared expert, H = 256, I = 128, f16.
func.func @e16_top4_shared1(%x: tensor<?x256xf16>, %logits: tensor<?x16xf32>,
                            %w13: tensor<17x256x256xf16>,
                            %w2: tensor<17x256x128xf16>) -> tensor<?x256xf16> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 4,
                               num_shared_experts = 1>}
       : (tensor<?x256xf16>, tensor<?x16xf32>, tensor<17x256x256xf16>,
          tensor<17x256x128xf16>) -> tensor<?x256xf16>
  return %y : tensor<?x256xf16>
}
