//===- RoutingMath.cpp - Routing arithmetic shared by the lowerings -------===//

#include "moe/Conversion/MoeCommon/RoutingMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

Value mlir::moe::emitRoutingExp(OpBuilder &b, Location loc, Value x) {
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  auto constant = [&](float value) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
  };
  // llvm.intr.fma rather than math.fma: every target has it natively and
  // the GPU lowering would otherwise route math.fma to libdevice.
  auto fma = [&](Value m, Value n, Value c) -> Value {
    return LLVM::FMAOp::create(b, loc, m, n, c);
  };
  // Reduce on a clamped copy so that NaN and infinities never reach the
  // float-to-int conversion; the selects at the end restore them.
  Value isNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, x, x);
  Value clamped = arith::SelectOp::create(b, loc, isNaN, constant(0.0f), x);
  clamped = arith::MinimumFOp::create(
      b, loc, arith::MaximumFOp::create(b, loc, clamped, constant(-87.0f)),
      constant(88.0f));
  // Round to nearest even by adding and subtracting 1.5 * 2^23, exact for
  // |v| < 2^22; unlike roundeven it needs no libm or libdevice call.
  Value v = arith::MulFOp::create(b, loc, clamped, constant(1.44269504f));
  Value n = arith::SubFOp::create(
      b, loc, arith::AddFOp::create(b, loc, v, constant(12582912.0f)),
      constant(12582912.0f));
  Value r = fma(n, constant(-0.693359375f), clamped);
  r = fma(n, constant(2.12194440e-4f), r);
  Value p = constant(1.9875691500e-4f);
  for (float coefficient :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
        5.0000001201e-1f})
    p = fma(p, r, constant(coefficient));
  Value y = arith::AddFOp::create(
      b, loc, fma(p, arith::MulFOp::create(b, loc, r, r), r), constant(1.0f));
  // 2^n from its exponent bits; n lies in [-126, 127] after the clamp.
  Value exponent =
      arith::AddIOp::create(b, loc, arith::FPToSIOp::create(b, loc, i32, n),
                            arith::ConstantIntOp::create(b, loc, i32, 127));
  Value scale = arith::BitcastOp::create(
      b, loc, f32,
      arith::ShLIOp::create(b, loc, exponent,
                            arith::ConstantIntOp::create(b, loc, i32, 23)));
  Value result = arith::MulFOp::create(b, loc, y, scale);
  Value tooLarge = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x,
                                         constant(88.0f));
  Value tooSmall = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, x,
                                         constant(-87.0f));
  result = arith::SelectOp::create(
      b, loc, tooLarge, constant(std::numeric_limits<float>::infinity()),
      result);
  result = arith::SelectOp::create(b, loc, tooSmall, constant(0.0f), result);
  return arith::SelectOp::create(b, loc, isNaN, x, result);
}

Value mlir::moe::emitRoutingSigmoid(OpBuilder &b, Location loc, Value x) {
  Value one = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f));
  Value negExp = emitRoutingExp(b, loc, arith::NegFOp::create(b, loc, x));
  return arith::DivFOp::create(b, loc, one,
                               arith::AddFOp::create(b, loc, one, negExp));
}

Value mlir::moe::emitSoftmaxMaxOperand(OpBuilder &b, Location loc,
                                       Value logit) {
  Value isNaN =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, logit, logit);
  Value negInf = arith::ConstantOp::create(
      b, loc, b.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
  return arith::SelectOp::create(b, loc, isNaN, negInf, logit);
}

Value mlir::moe::emitSoftmaxNumerator(OpBuilder &b, Location loc, Value logit,
                                      Value max) {
  Value isMax =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, logit, max);
  Value difference = arith::SelectOp::create(
      b, loc, isMax, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f)),
      arith::SubFOp::create(b, loc, logit, max));
  return emitRoutingExp(b, loc, difference);
}

Value mlir::moe::emitSoftmaxSummand(OpBuilder &b, Location loc,
                                    Value numerator) {
  Value isNaN = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO,
                                      numerator, numerator);
  return arith::SelectOp::create(
      b, loc, isNaN, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f)),
      numerator);
}

Value mlir::moe::emitRanksAbove(OpBuilder &b, Location loc, Value lhs,
                                Value rhs) {
  Value larger =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, lhs, rhs);
  Value rhsIsNaN =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, rhs, rhs);
  Value lhsIsNumber =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ORD, lhs, lhs);
  return arith::OrIOp::create(
      b, loc, larger, arith::AndIOp::create(b, loc, rhsIsNaN, lhsIsNumber));
}

/// x sigmoid(x) = x / (1 + exp(-x)) with the target's exp, the exp and the
/// division under `fastMath`.
static Value emitTimesSigmoid(OpBuilder &b, Location loc, Value x,
                              arith::FastMathFlags fastMath) {
  Value one = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f));
  Value negExp =
      math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x), fastMath);
  return arith::DivFOp::create(
      b, loc, x, arith::AddFOp::create(b, loc, one, negExp), fastMath);
}

/// gpt-oss's activation: gate = min(gate, limit), up = clamp(up, -limit,
/// limit), (up + 1) * gate / (1 + exp(-alpha * gate)); minimumf and
/// maximumf keep NaN, as torch's clamp does.
static Value emitClampedSwiglu(OpBuilder &b, Location loc,
                               moe::SwigluAttr swiglu, Value gate, Value up,
                               arith::FastMathFlags fastMath) {
  auto constant = [&](float value) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
  };
  Value limit =
      constant(static_cast<float>(swiglu.getLimit().convertToDouble()));
  Value alpha =
      constant(static_cast<float>(swiglu.getAlpha().convertToDouble()));
  gate = arith::MinimumFOp::create(b, loc, gate, limit);
  up = arith::MaximumFOp::create(b, loc,
                                 arith::MinimumFOp::create(b, loc, up, limit),
                                 arith::NegFOp::create(b, loc, limit));
  Value one = constant(1.0f);
  Value negExp = math::ExpOp::create(
      b, loc,
      arith::NegFOp::create(b, loc, arith::MulFOp::create(b, loc, alpha, gate)),
      fastMath);
  Value glu = arith::DivFOp::create(
      b, loc, gate, arith::AddFOp::create(b, loc, one, negExp), fastMath);
  return arith::MulFOp::create(b, loc, arith::AddFOp::create(b, loc, up, one),
                               glu);
}

Value mlir::moe::emitGatedPair(OpBuilder &b, Location loc,
                               Activation activation, SwigluAttr swiglu,
                               Value gate, Value up,
                               arith::FastMathFlags fastMath) {
  if (activation == Activation::clamped_swiglu)
    return emitClampedSwiglu(b, loc, swiglu, gate, up, fastMath);
  if (activation == Activation::silu_and_mul)
    return arith::MulFOp::create(b, loc,
                                 emitTimesSigmoid(b, loc, gate, fastMath), up);
  auto constant = [&](float value) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
  };
  Value one = constant(1.0f);
  Value erf = math::ErfOp::create(
      b, loc,
      arith::MulFOp::create(b, loc, gate, constant(0.70710678118654752440f)));
  Value half = arith::MulFOp::create(b, loc, constant(0.5f), gate);
  Value gelu = arith::MulFOp::create(b, loc, half,
                                     arith::AddFOp::create(b, loc, one, erf));
  return arith::MulFOp::create(b, loc, gelu, up);
}
