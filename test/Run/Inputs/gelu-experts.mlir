// Experts given routing: f32, GELU-and-mul, 6 experts, 3 slots per token.
func.func @experts(%x: tensor<?x32xf32>, %ids: tensor<?x3xi32>,
                   %w: tensor<?x3xf32>, %w13: tensor<6x32x32xf32>,
                   %w2: tensor<6x32x16xf32>) -> tensor<?x32xf32> {
  %y = moe.fused_experts %x, %ids, %w, %w13, %w2 activation(gelu_and_mul)
       : (tensor<?x32xf32>, tensor<?x3xi32>, tensor<?x3xf32>,
          tensor<6x32x32xf32>, tensor<6x32x16xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
