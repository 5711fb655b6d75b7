//===- RoutingMath.h - Routing arithmetic shared by the lowerings -*- C++ -*-=//
//
// The arithmetic of moe.gate that decides which experts a token gets. Every
// lowering (CPU loops, GPU kernels) emits it through these helpers so that
// all targets pick bit-identical ids: exp is a fixed polynomial (not libm or
// libdevice, which round differently), only correctly rounded operations and
// explicit fmas are used, and the softmax denominator is summed in one fixed
// order. lib/Reference implements the same formulas in C++.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOECOMMON_ROUTINGMATH_H
#define MOE_CONVERSION_MOECOMMON_ROUTINGMATH_H

#include "moe/Dialect/Moe/IR/MoeAttrs.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

namespace mlir {
namespace moe {

/// Lanes of the softmax denominator: expert e adds into partial sum e % 32,
/// in increasing e, and the 32 partials are added pairwise (p0 + p1,
/// p2 + p3, ..., then those pairs, ...), the order of a warp butterfly.
constexpr int64_t kSoftmaxSumLanes = 32;

/// exp(x) for f32 `x`, bit-identical on every target: NaN passes through,
/// x > 88 gives +inf, x < -87 gives 0; otherwise n = x log2 e rounded to
/// nearest even (by adding and subtracting 1.5 * 2^23),
/// r = x - n ln2 (two fmas, Cody-Waite), a degree-5 polynomial in r by
/// Horner's rule in fmas (Cephes expf), scaled by 2^n through the exponent
/// bits.
Value emitRoutingExp(OpBuilder &b, Location loc, Value x);

/// sigmoid(x) = 1 / (1 + emitRoutingExp(-x)).
Value emitRoutingSigmoid(OpBuilder &b, Location loc, Value x);

// The softmax of one row of logits, as moe.gate defines it: a NaN logit takes
// no part (it neither sets the max nor adds to the denominator, and its score
// stays NaN, which ranks lowest and weighs 0), and x - max is 0 where x
// equals the max, so that +inf logits share the whole weight equally (a row
// of -inf, all of it) where plain x - max would give NaN. A lowering takes
// the max of emitSoftmaxMaxOperand over the row, sums emitSoftmaxSummand of
// each emitSoftmaxNumerator in the order kSoftmaxSumLanes fixes, and divides
// each numerator by that sum.

/// The value the row's max is taken over: `logit`, or -inf where it is NaN.
Value emitSoftmaxMaxOperand(OpBuilder &b, Location loc, Value logit);

/// emitRoutingExp(logit - max), with the difference 0 where `logit` equals
/// `max`; NaN where `logit` is NaN.
Value emitSoftmaxNumerator(OpBuilder &b, Location loc, Value logit, Value max);

/// What `numerator` adds to the denominator: itself, or 0 where it is NaN.
Value emitSoftmaxSummand(OpBuilder &b, Location loc, Value numerator);

/// True when `lhs` ranks above `rhs` for selection: the larger wins and NaN
/// loses; equal values do not rank above each other, so a scan in index
/// order keeps the lower index.
Value emitRanksAbove(OpBuilder &b, Location loc, Value lhs, Value rhs);

/// The gated activation `activation` of the f32 pair (`gate`, `up`) of a
/// GEMM's outputs: act(gate) * up with SiLU x / (1 + exp(-x)) or GELU
/// 0.5 x (1 + erf(x / sqrt 2)), or the clamped SwiGLU of `swiglu`'s alpha
/// and limit (#moe.swiglu), with the target's exp and erf (libm,
/// libdevice): GEMM outputs are compared to a tolerance, unlike routing
/// decisions. The exp and the division carry `fastMath`: the GPU epilogues'
/// `afn` takes libdevice's fast exp and an approximate division, a few ulp
/// of f32 where the bf16 outputs keep 8 bits.
Value emitGatedPair(OpBuilder &b, Location loc, Activation activation,
                    SwigluAttr swiglu, Value gate, Value up,
                    arith::FastMathFlags fastMath);

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_MOECOMMON_ROUTINGMATH_H
