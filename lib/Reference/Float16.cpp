//===- Float16.cpp - bf16 and fp16 bit conversions ------------------------===//

#include "moe/Reference/Float16.h"

#include <cmath>
#include <cstring>

static uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

static float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t mlir::moe::reference::toBFloat16Bits(float value) {
  uint32_t bits = bitsOf(value);
  if (std::isnan(value))
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  // Round to nearest, ties to even, on the 16 bits that are dropped.
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float mlir::moe::reference::fromBFloat16Bits(uint16_t bits) {
  return floatOf(uint32_t(bits) << 16);
}

float mlir::moe::reference::fromHalfBits(uint16_t half) {
  uint32_t sign = uint32_t(half & 0x8000) << 16;
  uint32_t exponent = (half >> 10) & 0x1F, mantissa = half & 0x3FF;
  if (exponent == 0x1F) // Inf or NaN.
    return floatOf(sign | 0x7F800000 | (mantissa << 13));
  if (exponent == 0) // Zero or subnormal: mantissa * 2^-24.
    return (sign ? -1.0f : 1.0f) * std::ldexp(float(mantissa), -24);
  return floatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t mlir::moe::reference::toHalfBits(float value) {
  uint32_t bits = bitsOf(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  float magnitude = std::fabs(value);
  if (std::isnan(value))
    return sign | 0x7E00;
  if (magnitude >= 65520.0f) // Rounds past the largest half, 65504.
    return sign | 0x7C00;
  if (magnitude < 6.103515625e-05f) {
    // Subnormal half: a multiple of 2^-24, rounded to nearest even.
    float scaled = std::nearbyint(magnitude * 16777216.0f);
    return sign | static_cast<uint16_t>(scaled);
  }
  uint32_t magnitudeBits = bitsOf(magnitude);
  // Rebias the exponent and round the 13 dropped mantissa bits to even.
  magnitudeBits -= 112u << 23;
  magnitudeBits += 0xFFF + ((magnitudeBits >> 13) & 1);
  return sign | static_cast<uint16_t>(magnitudeBits >> 13);
}
