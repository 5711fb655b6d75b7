// A layer with fp8 weights scaled per expert (tensor) and per 32x32 block
// (block_size 32: H = 80 and I = 48 leave ragged blocks): f32 hidden
// states, softmax top-2 of 8 experts. @block is the same layer with blocks.
func.func @tensor(%x: tensor<?x80xf32>, %l: tensor<?x8xf32>,
                  %w13: tensor<8x96x80xf8E4M3FN>, %w2: tensor<8x80x48xf8E4M3FN>,
                  %s13: tensor<8xf32>, %s2: tensor<8xf32>) -> tensor<?x80xf32> {
  %y = moe.fused_moe %x, %l, %w13, %w2 scales(%s13, %s2)
         activation(gelu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
          quantization = #moe.quantization<weights = tensor, activations = token>}
       : (tensor<?x80xf32>, tensor<?x8xf32>, tensor<8x96x80xf8E4M3FN>,
          tensor<8x80x48xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>)
       -> tensor<?x80xf32>
  return %y : tensor<?x80xf32>
}

func.func @block(%x: tensor<?x80xf32>, %l: tensor<?x8xf32>,
                 %w13: tensor<8x96x80xf8E4M3FN>, %w2: tensor<8x80x48xf8E4M3FN>,
                 %s13: tensor<8x3x3xf32>, %s2: tensor<8x3x2xf32>)
    -> tensor<?x80xf32> {
  %y = moe.fused_moe %x, %l, %w13, %w2 scales(%s13, %s2)
         activation(gelu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
          quantization = #moe.quantization<weights = block, activations = token_group, block_size = 32>}
       : (tensor<?x80xf32>, tensor<?x8xf32>, tensor<8x96x80xf8E4M3FN>,
          tensor<8x80x48xf8E4M3FN>, tensor<8x3x3xf32>, tensor<8x3x2xf32>)
       -> tensor<?x80xf32>
  return %y : tensor<?x80xf32>
}

// @static: the layer with static activation scales, one per GEMM input.
func.func @static(%x: tensor<?x80xf32>, %l: tensor<?x8xf32>,
                  %w13: tensor<8x96x80xf8E4M3FN>, %w2: tensor<8x80x48xf8E4M3FN>,
                  %s13: tensor<8xf32>, %s2: tensor<8xf32>,
                  %a13: tensor<1xf32>, %a2: tensor<1xf32>) -> tensor<?x80xf32> {
  %y = moe.fused_moe %x, %l, %w13, %w2 scales(%s13, %s2) input_scales(%a13, %a2)
         activation(gelu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>,
          quantization = #moe.quantization<weights = tensor, activations = static_tensor>}
       : (tensor<?x80xf32>, tensor<?x8xf32>, tensor<8x96x80xf8E4M3FN>,
          tensor<8x80x48xf8E4M3FN>, tensor<8xf32>, tensor<8xf32>,
          tensor<1xf32>, tensor<1xf32>) -> tensor<?x80xf32>
  return %y : tensor<?x80xf32>
}
