// A layer function with an argument that is not a tensor (moe-run crashed
// making its input).
func.func @scalar_argument(%x: tensor<?x64xf32>, %l: tensor<?x8xf32>, %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>, %k: i32, %b: tensor<8xf32>) -> tensor<?x64xf32> {
  %y = moe.fused_moe %x, %l, %w13, %w2 bias(%b) activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2>}
       : (tensor<?x64xf32>, tensor<?x8xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
