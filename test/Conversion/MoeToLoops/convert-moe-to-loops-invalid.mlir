// convert-moe-to-loops refuses a moe.fused_moe that was not decomposed.
// RUN: moe-opt %s --convert-moe-to-loops --verify-diagnostics

func.func @fused(%x: tensor<4x64xbf16>, %l: tensor<4x8xf32>, %w13: tensor<8x32x64xbf16>, %w2: tensor<8x64x16xbf16>) -> tensor<4x64xbf16> {
  // expected-error @below {{convert-moe-to-loops: run moe-decompose first}}
  %y = moe.fused_moe %x, %l, %w13, %w2 activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2>}
    : (tensor<4x64xbf16>, tensor<4x8xf32>, tensor<8x32x64xbf16>, tensor<8x64x16xbf16>) -> tensor<4x64xbf16>
  return %y : tensor<4x64xbf16>
}
