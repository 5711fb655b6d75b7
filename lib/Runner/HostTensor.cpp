//===- HostTensor.cpp - Dense host tensors of the moe element types -------===//

#include "moe/Runner/HostTensor.h"

#include <cassert>
#include <cmath>
#include <cstring>

using namespace mlir::moe;

namespace {
uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t toBF16(float value) {
  uint32_t bits = bitsOf(value);
  if (std::isnan(value))
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  // Round to nearest, ties to even, on the 16 bits that are dropped.
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float fromBF16(uint16_t bits) { return floatOf(uint32_t(bits) << 16); }

float fromF16(uint16_t half) {
  uint32_t sign = uint32_t(half & 0x8000) << 16;
  uint32_t exponent = (half >> 10) & 0x1F, mantissa = half & 0x3FF;
  if (exponent == 0x1F) // Inf or NaN.
    return floatOf(sign | 0x7F800000 | (mantissa << 13));
  if (exponent == 0) // Zero or subnormal: mantissa * 2^-24.
    return (sign ? -1.0f : 1.0f) * std::ldexp(float(mantissa), -24);
  return floatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t toF16(float value) {
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
} // namespace

const char *mlir::moe::elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F16:
    return "f16";
  case ElementType::I32:
    return "i32";
  }
  return "?";
}

int64_t mlir::moe::elementTypeBytes(ElementType type) {
  return type == ElementType::BF16 || type == ElementType::F16 ? 2 : 4;
}

float mlir::moe::roundTo(ElementType type, float value) {
  switch (type) {
  case ElementType::BF16:
    return fromBF16(toBF16(value));
  case ElementType::F16:
    return fromF16(toF16(value));
  default:
    return value;
  }
}

HostTensor::HostTensor(ElementType type, std::vector<int64_t> shape)
    : type(type), shape(std::move(shape)) {
  bytes.resize(numElements() * elementTypeBytes(type));
}

HostTensor HostTensor::fromFloats(ElementType type, std::vector<int64_t> shape,
                                  const std::vector<float> &values) {
  assert(type != ElementType::I32 && "fromFloats of an integer tensor");
  HostTensor tensor(type, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == tensor.numElements());
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == ElementType::F32) {
      std::memcpy(tensor.bytes.data() + 4 * i, &values[i], 4);
      continue;
    }
    uint16_t half =
        type == ElementType::BF16 ? toBF16(values[i]) : toF16(values[i]);
    std::memcpy(tensor.bytes.data() + 2 * i, &half, 2);
  }
  return tensor;
}

HostTensor HostTensor::fromInts(std::vector<int64_t> shape,
                                const std::vector<int32_t> &values) {
  HostTensor tensor(ElementType::I32, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == tensor.numElements());
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

int64_t HostTensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

std::vector<float> HostTensor::toFloats() const {
  assert(type != ElementType::I32 && "toFloats of an integer tensor");
  std::vector<float> values(numElements());
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == ElementType::F32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
      continue;
    }
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * i, 2);
    values[i] = type == ElementType::BF16 ? fromBF16(half) : fromF16(half);
  }
  return values;
}

std::vector<int32_t> HostTensor::toInts() const {
  assert(type == ElementType::I32 && "toInts of a float tensor");
  std::vector<int32_t> values(numElements());
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

std::string HostTensor::typeString() const {
  std::string text = "tensor<";
  for (int64_t dim : shape)
    text += std::to_string(dim) + "x";
  return text + elementTypeName(type) + ">";
}
