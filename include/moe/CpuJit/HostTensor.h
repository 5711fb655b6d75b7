//===- HostTensor.h - Dense host tensors of the moe element types -*- C++ -*-=//

#ifndef MOE_CPUJIT_HOSTTENSOR_H
#define MOE_CPUJIT_HOSTTENSOR_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
namespace moe {

/// The element types a layer's operands and results may have (F8E4M3FN:
/// float8 e4m3fn, `f8E4M3FN` in MLIR, stored as its one-byte codes; I8:
/// bytes, such as packed MXFP4 weights, two e2m1 codes each; F8E8M0FNU: the
/// MX formats' power-of-two scales, 2^(code - 127)).
enum class ElementType { F32, BF16, F16, I32, F8E4M3FN, I8, F8E8M0FNU };

/// Returns "f32", "bf16", "f16", "i32", "f8E4M3FN", "i8" or "f8E8M0FNU".
const char *elementTypeName(ElementType type);
int64_t elementTypeBytes(ElementType type);

/// Rounds `value` to the nearest value representable in `type` (ties to
/// even, e4m3 saturating to +-448 as reference::toE4M3; the identity for
/// F32).
float roundTo(ElementType type, float value);

/// A dense row-major host tensor owning its bytes.
struct HostTensor {
  ElementType type = ElementType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(ElementType type, std::vector<int64_t> shape);
  /// Stores `values` converted (rounded) to `type`.
  static HostTensor fromFloats(ElementType type, std::vector<int64_t> shape,
                               const std::vector<float> &values);
  static HostTensor fromInts(std::vector<int64_t> shape,
                             const std::vector<int32_t> &values);
  /// A tensor of a one-byte type holding `codes` as they are.
  static HostTensor fromCodes(ElementType type, std::vector<int64_t> shape,
                              const std::vector<uint8_t> &codes);

  int64_t numElements() const;
  /// The elements widened to float (F32, BF16, F16, F8E4M3FN, F8E8M0FNU).
  std::vector<float> toFloats() const;
  /// The elements of an I32 tensor.
  std::vector<int32_t> toInts() const;
  /// E.g. "tensor<4x8xbf16>".
  std::string typeString() const;
};

} // namespace moe
} // namespace mlir

#endif // MOE_CPUJIT_HOSTTENSOR_H
