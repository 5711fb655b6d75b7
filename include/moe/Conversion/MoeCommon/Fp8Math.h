//===- Fp8Math.h - 8- and 4-bit float codes as arith ops --------*- C++ -*-===//
//
// float8 e4m3fn (`f8E4M3FN`) conversions, and the decoding of the OCP MX
// formats' e2m1 values and e8m0 scales (MXFP4), emitted as integer and f32
// arith ops, for the lowerings whose target has no such arithmetic: LLVM
// has no f8 or f4 type (its type converter stores `f8E4M3FN` and
// `f8E8M0FNU` as i8), so the lowerings move codes as i8 (arith.bitcast)
// and convert them with these helpers. The e4m3 rounding is that of
// Hopper's `cvt.rn.satfinite.e4m3x2.f32`, as moe.quantize defines it;
// lib/Reference implements all of them apart in C++.
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

/// The exact f32 value of the e2m1 code in the low 4 bits of the i32
/// `nibble` (the rest zero): +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
Value emitF32FromE2M1(OpBuilder &b, Location loc, Value nibble);

/// The f32 value 2^(code - 127) of the e8m0 scale `code` (i8, unsigned):
/// 2^-127 (a subnormal) for 0, NaN for 0xFF.
Value emitF32FromE8M0(OpBuilder &b, Location loc, Value code);

/// moe.quantize's dynamic scale of a group whose largest |x| is `amax`
/// (f32): max(amax, 1e-10) / 448, NaN staying NaN. One definition for the
/// CPU loops, the quantize kernel and the fused GEMM epilogue, which must
/// agree bit for bit.
Value emitQuantizationScale(OpBuilder &b, Location loc, Value amax);

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_MOECOMMON_FP8MATH_H
