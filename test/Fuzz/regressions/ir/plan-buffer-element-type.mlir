func.func @gate(%l: tensor<?x8xf32>, %x: tensor<4xi22>) -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  %w, %i = moe.gate %l {router = #moe.router<scoring = softmax, top_k = 2>} : (tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi32>
}
