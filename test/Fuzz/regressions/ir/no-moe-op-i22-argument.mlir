

func.func @route_blocks(%ids: tensor<4x3xi22>) {
  // expected-errxf17>2>, tensor<i32>)
  return
}

