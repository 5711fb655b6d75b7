//===- HostTensor.cpp - Dense host tensors of the moe element types -------===//

#include "moe/CpuJit/HostTensor.h"
#include "moe/Reference/Float16.h"
#include "moe/Reference/Quantization.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

using namespace mlir::moe;

using mlir::moe::reference::fromBFloat16Bits;
using mlir::moe::reference::fromE4M3;
using mlir::moe::reference::fromHalfBits;
using mlir::moe::reference::toBFloat16Bits;
using mlir::moe::reference::toE4M3;
using mlir::moe::reference::toHalfBits;

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
  case ElementType::F8E4M3FN:
    return "f8E4M3FN";
  case ElementType::I8:
    return "i8";
  case ElementType::F8E8M0FNU:
    return "f8E8M0FNU";
  }
  return "?";
}

int64_t mlir::moe::elementTypeBytes(ElementType type) {
  if (type == ElementType::F8E4M3FN || type == ElementType::I8 ||
      type == ElementType::F8E8M0FNU)
    return 1;
  return type == ElementType::BF16 || type == ElementType::F16 ? 2 : 4;
}

float mlir::moe::roundTo(ElementType type, float value) {
  switch (type) {
  case ElementType::BF16:
    return fromBFloat16Bits(toBFloat16Bits(value));
  case ElementType::F16:
    return fromHalfBits(toHalfBits(value));
  case ElementType::F8E4M3FN:
    return fromE4M3(toE4M3(value));
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
  assert(type != ElementType::I32 && type != ElementType::I8 &&
         type != ElementType::F8E8M0FNU && "fromFloats of a code tensor");
  HostTensor tensor(type, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == tensor.numElements());
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == ElementType::F32) {
      std::memcpy(tensor.bytes.data() + 4 * i, &values[i], 4);
      continue;
    }
    if (type == ElementType::F8E4M3FN) {
      tensor.bytes[i] = toE4M3(values[i]);
      continue;
    }
    uint16_t half = type == ElementType::BF16 ? toBFloat16Bits(values[i])
                                              : toHalfBits(values[i]);
    std::memcpy(tensor.bytes.data() + 2 * i, &half, 2);
  }
  return tensor;
}

HostTensor HostTensor::fromInts(std::vector<int64_t> shape,
                                const std::vector<int32_t> &values) {
  HostTensor tensor(ElementType::I32, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == tensor.numElements());
  // std::copy, not memcpy: an empty vector's data() may be null.
  std::copy(reinterpret_cast<const uint8_t *>(values.data()),
            reinterpret_cast<const uint8_t *>(values.data() + values.size()),
            tensor.bytes.begin());
  return tensor;
}

HostTensor HostTensor::fromCodes(ElementType type, std::vector<int64_t> shape,
                                 const std::vector<uint8_t> &codes) {
  assert(elementTypeBytes(type) == 1 && "fromCodes of a wider type");
  HostTensor tensor(type, std::move(shape));
  assert(static_cast<int64_t>(codes.size()) == tensor.numElements());
  tensor.bytes = codes;
  return tensor;
}

int64_t HostTensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

std::vector<float> HostTensor::toFloats() const {
  assert(type != ElementType::I32 && type != ElementType::I8 &&
         "toFloats of an integer tensor");
  std::vector<float> values(numElements());
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == ElementType::F32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
      continue;
    }
    if (type == ElementType::F8E4M3FN) {
      values[i] = fromE4M3(bytes[i]);
      continue;
    }
    if (type == ElementType::F8E8M0FNU) {
      values[i] = reference::fromE8M0(bytes[i]);
      continue;
    }
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * i, 2);
    values[i] =
        type == ElementType::BF16 ? fromBFloat16Bits(half) : fromHalfBits(half);
  }
  return values;
}

std::vector<int32_t> HostTensor::toInts() const {
  assert(type == ElementType::I32 && "toInts of a float tensor");
  std::vector<int32_t> values(numElements());
  std::copy(bytes.begin(), bytes.end(),
            reinterpret_cast<uint8_t *>(values.data()));
  return values;
}

std::string HostTensor::typeString() const {
  std::string text = "tensor<";
  for (int64_t dim : shape)
    text += std::to_string(dim) + "x";
  return text + elementTypeName(type) + ">";
}
