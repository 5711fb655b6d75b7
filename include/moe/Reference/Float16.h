//===- Float16.h - bf16 and fp16 bit conversions ----------------*- C++ -*-===//
//
// Round-to-nearest-even conversions between float and the bit patterns of
// bf16 and IEEE half, for hosts without native 16-bit float types; shared by
// the host tensors of the CPU path and the reference's storage rounding.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_REFERENCE_FLOAT16_H
#define MOE_REFERENCE_FLOAT16_H

#include <cstdint>

namespace mlir {
namespace moe {
namespace reference {

uint16_t toBFloat16Bits(float value);
float fromBFloat16Bits(uint16_t bits);
uint16_t toHalfBits(float value);
float fromHalfBits(uint16_t bits);

} // namespace reference
} // namespace moe
} // namespace mlir

#endif // MOE_REFERENCE_FLOAT16_H
