// One Mixtral-8x7B MoE layer (H = 4096, I = 14336): 8 experts, softmax top-2,
// renormalised. The token count is dynamic.
//
//   moe-opt --moe-decompose examples/mixtral-8x7b.mlir
func.func @mixtral_8x7b_moe(%hidden_states: tensor<?x4096xbf16>,
                            %router_logits: tensor<?x8xbf16>,
                            %w13: tensor<8x28672x4096xbf16>,
                            %w2: tensor<8x4096x14336xbf16>)
    -> tensor<?x4096xbf16> {
  %y = moe.fused_moe %hidden_states, %router_logits, %w13, %w2
         activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}
       : (tensor<?x4096xbf16>, tensor<?x8xbf16>, tensor<8x28672x4096xbf16>,
          tensor<8x4096x14336xbf16>) -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}
