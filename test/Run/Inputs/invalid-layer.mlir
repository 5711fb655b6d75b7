// Malformed: moe.combine needs [T, S, H] rows.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = moe.combine %x : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
