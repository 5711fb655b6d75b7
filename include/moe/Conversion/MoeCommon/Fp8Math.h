//===- Fp8Math.h - e4m3 encoding and decoding as arith ops ------*- C++ -*-===//
//
// float8 e4m3fn (`f8E4M3FN`) conversions emitted as integer and f32 arith
// ops, for the lowerings whose target has no f8 arithmetic: LLVM has no f8
// type (its type converter stores `f8E4M3FN` as i8), so the lowerings move
// codes as i8 (arith.bitcast) and convert them with these helpers. The
// rounding is that of Hopper's `cvt.rn.satfinite.e4m3x2.f32`, as
// moe.quantize defines it; lib/Reference implements it apart in C++.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOECOMMON_FP8MATH_H
#define MOE_CONVERSION_MOECOMMON_FP8MATH_H

#include "mlir/IR/Builders.h"

namespace mlir {
namespace moe {

/// The e4m3 code (i8) of the f32 `x`: the nearest e4m3 value, ties to the
/// even code; finite magnitudes beyond 448 and infinities saturate to +-448
/// (0x7E, 0xFE), NaN gives 0x7F, and the sign of zero is kept.
Value emitE4M3FromF32(OpBuilder &b, Location loc, Value x);

/// The exact f32 value of the e4m3 code `code` (i8): NaN for 0x7F and 0xFF.
Value emitF32FromE4M3(OpBuilder &b, Location loc, Value code);

/// moe.quantize's dynamic scale of a group whose largest |x| is `amax`
/// (f32): max(amax, 1e-10) / 448, NaN staying NaN. One definition for the
/// CPU loops, the quantize kernel and the fused GEMM epilogue, which must
/// agree bit for bit.
Value emitQuantizationScale(OpBuilder &b, Location loc, Value amax);

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_MOECOMMON_FP8MATH_H
