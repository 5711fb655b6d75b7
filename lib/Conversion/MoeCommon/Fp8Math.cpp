//===- Fp8Math.cpp - 8- and 4-bit float codes as arith ops ----------------===//

#include "moe/Conversion/MoeCommon/Fp8Math.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace {

/// i32 and f32 arith at one location, for the bit manipulations below.
struct BitBuilder {
  OpBuilder &b;
  Location loc;

  Value i32(int64_t value) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), value);
  }
  Value f32(float value) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
  }
  Value toBits(Value f32Value) {
    return arith::BitcastOp::create(b, loc, b.getI32Type(), f32Value);
  }
  Value toFloat(Value bits) {
    return arith::BitcastOp::create(b, loc, b.getF32Type(), bits);
  }
  Value andi(Value lhs, int64_t mask) {
    return arith::AndIOp::create(b, loc, lhs, i32(mask));
  }
  Value ori(Value lhs, Value rhs) {
    return arith::OrIOp::create(b, loc, lhs, rhs);
  }
  Value shli(Value lhs, int64_t bits) {
    return arith::ShLIOp::create(b, loc, lhs, i32(bits));
  }
  Value shrui(Value lhs, int64_t bits) {
    return arith::ShRUIOp::create(b, loc, lhs, i32(bits));
  }
  Value addi(Value lhs, Value rhs) {
    return arith::AddIOp::create(b, loc, lhs, rhs);
  }
  Value cmpi(arith::CmpIPredicate predicate, Value lhs, int64_t rhs) {
    return arith::CmpIOp::create(b, loc, predicate, lhs, i32(rhs));
  }
  Value select(Value cond, Value lhs, Value rhs) {
    return arith::SelectOp::create(b, loc, cond, lhs, rhs);
  }
};

/// f32 bit patterns: 2^-6 (the smallest normal e4m3 magnitude), 2^23, and
/// the exponent field of +infinity.
constexpr int64_t kSmallestNormalBits = 0x3C800000;
constexpr int64_t kTwoPow23Bits = 0x4B000000;
constexpr int64_t kInfinityBits = 0x7F800000;
/// e4m3 codes: the largest finite magnitude (448) and NaN.
constexpr int64_t kMaxFiniteCode = 0x7E;
constexpr int64_t kNaNCode = 0x7F;
/// The f32 exponent bias minus e4m3's (127 - 7).
constexpr int64_t kRebias = 120;

} // namespace

Value mlir::moe::emitE4M3FromF32(OpBuilder &b, Location loc, Value x) {
  BitBuilder bb{b, loc};
  Value bits = bb.toBits(x);
  Value magnitude = bb.andi(bits, 0x7FFFFFFF);
  // Normal e4m3 magnitudes (>= 2^-6): f32's exponent rebiased and its top 3
  // mantissa bits, the 20 dropped bits rounded to nearest even by adding
  // 0x7FFFF plus the last kept bit (a carry moves into the exponent). No
  // overflow: infinity's bits plus 0x80000 stay below 2^31.
  Value lastKept = bb.andi(bb.shrui(magnitude, 20), 1);
  Value rounded =
      bb.shrui(bb.addi(bb.addi(magnitude, bb.i32(0x7FFFF)), lastKept), 20);
  Value normal = arith::SubIOp::create(b, loc, rounded, bb.i32(kRebias << 3));
  // Smaller magnitudes are m * 2^-9 with m <= 8 (8 is code 0x08, 2^-6):
  // |x| * 2^9 is exact, and adding 2^23, where f32's spacing is 1, rounds
  // it to the nearest integer, ties to even, left in the low mantissa bits.
  Value scaled =
      arith::MulFOp::create(b, loc, bb.toFloat(magnitude), bb.f32(512.0f));
  Value shifted = arith::AddFOp::create(b, loc, scaled, bb.f32(8388608.0f));
  Value subnormal =
      arith::SubIOp::create(b, loc, bb.toBits(shifted), bb.i32(kTwoPow23Bits));
  Value code = bb.select(
      bb.cmpi(arith::CmpIPredicate::ult, magnitude, kSmallestNormalBits),
      subnormal, normal);
  // Codes grow with |x|: beyond 448 and infinities saturate.
  code = arith::MinUIOp::create(b, loc, code, bb.i32(kMaxFiniteCode));
  Value sign = bb.andi(bb.shrui(bits, 24), 0x80);
  code = bb.select(bb.cmpi(arith::CmpIPredicate::ugt, magnitude, kInfinityBits),
                   bb.i32(kNaNCode), bb.ori(code, sign));
  return arith::TruncIOp::create(b, loc, b.getI8Type(), code);
}

Value mlir::moe::emitF32FromE4M3(OpBuilder &b, Location loc, Value code) {
  BitBuilder bb{b, loc};
  Value bits = arith::ExtUIOp::create(b, loc, b.getI32Type(), code);
  Value exponent = bb.andi(bb.shrui(bits, 3), 0xF);
  Value mantissa = bb.andi(bits, 0x7);
  Value normal = bb.ori(bb.shli(bb.addi(exponent, bb.i32(kRebias)), 23),
                        bb.shli(mantissa, 20));
  // Subnormals (exponent field 0) are m * 2^-9, exact in f32.
  Value subnormal = bb.toBits(arith::MulFOp::create(
      b, loc, arith::UIToFPOp::create(b, loc, b.getF32Type(), mantissa),
      bb.f32(0x1p-9f)));
  Value magnitude = bb.select(bb.cmpi(arith::CmpIPredicate::eq, exponent, 0),
                              subnormal, normal);
  magnitude = bb.select(
      bb.cmpi(arith::CmpIPredicate::eq, bb.andi(bits, 0x7F), kNaNCode),
      bb.i32(0x7FC00000), magnitude);
  Value sign = bb.shli(bb.andi(bits, 0x80), 24);
  return bb.toFloat(bb.ori(magnitude, sign));
}

Value mlir::moe::emitF32FromE2M1(OpBuilder &b, Location loc, Value nibble) {
  BitBuilder bb{b, loc};
  // The exponent and mantissa bits (3) placed at f32's exponent LSB and
  // first mantissa bit read as 2^-126 times the e2m1 magnitude (code 1, the
  // subnormal 0.5, as the f32 subnormal 2^-127); 2^126 scales it exactly.
  Value bits =
      bb.ori(bb.shli(bb.andi(nibble, 8), 28), bb.shli(bb.andi(nibble, 7), 22));
  return arith::MulFOp::create(b, loc, bb.toFloat(bits), bb.f32(0x1p126f));
}

Value mlir::moe::emitF32FromE8M0(OpBuilder &b, Location loc, Value code) {
  BitBuilder bb{b, loc};
  Value exponent = arith::ExtUIOp::create(b, loc, b.getI32Type(), code);
  // 2^(e - 127) is f32's normal e for e in [1, 254]; 0 is the subnormal
  // 2^-127 and 0xFF NaN.
  Value normal = bb.shli(exponent, 23);
  Value value = bb.select(bb.cmpi(arith::CmpIPredicate::eq, exponent, 0),
                          bb.i32(0x00400000), normal);
  return bb.toFloat(bb.select(bb.cmpi(arith::CmpIPredicate::eq, exponent, 0xFF),
                              bb.i32(0x7FC00000), value));
}

Value mlir::moe::emitQuantizationScale(OpBuilder &b, Location loc, Value amax) {
  auto f32 = [&](float value) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(value));
  };
  // maximumf keeps a NaN amax NaN.
  Value floor = arith::MaximumFOp::create(b, loc, amax, f32(1e-10f));
  return arith::DivFOp::create(b, loc, floor, f32(448.0f));
}
