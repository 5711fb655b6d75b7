// An f32 layer with GELU-and-mul, a correction bias, grouped routing and two
// fused shared experts.
func.func @gelu_layer(%x: tensor<?x32xf32>, %logits: tensor<?x16xf32>,
                      %w13: tensor<18x48x32xf32>, %w2: tensor<18x32x24xf32>,
                      %bias: tensor<16xf32>) -> tensor<?x32xf32> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 bias(%bias) activation(gelu_and_mul)
         {router = #moe.router<scoring = sigmoid, top_k = 3, num_groups = 4,
                               topk_groups = 2, renormalize = true,
                               routed_scaling_factor = 1.5,
                               num_shared_experts = 2>}
       : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<18x48x32xf32>,
          tensor<18x32x24xf32>, tensor<16xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
