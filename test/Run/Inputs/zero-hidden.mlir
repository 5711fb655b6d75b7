// A layer of hidden size 0, which verified and then passed moe-run's check
// with nothing to compare.
func.func @zero_hidden(%x: tensor<?x0xf32>, %l: tensor<?x8xf32>, %w13: tensor<8x64x0xf32>, %w2: tensor<8x0x32xf32>) -> tensor<?x0xf32> {
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2>}
       : (tensor<?x0xf32>, tensor<?x8xf32>, tensor<8x64x0xf32>, tensor<8x0x32xf32>) -> tensor<?x0xf32>
  return %y : tensor<?x0xf32>
}
