//===- MoeTypes.cpp - moe types -------------------------------------------===//

#include "moe/Dialect/Moe/IR/MoeTypes.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#define GET_TYPEDEF_CLASSES
#include "moe/Dialect/Moe/IR/MoeTypes.cpp.inc"

void MoeDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "moe/Dialect/Moe/IR/MoeTypes.cpp.inc"
      >();
}

/// TMA's limits (cuTensorMapEncodeTiled): 1 to 5 dims, box edges of 1 to 256
/// elements, an innermost box edge of whole 16-byte units that fits in the
/// swizzle span when there is one.
LogicalResult
TensorMapType::verify(function_ref<InFlightDiagnostic()> emitError,
                      Type elementType, ArrayRef<int64_t> box,
                      int64_t swizzle) {
  if (!elementType.isIntOrFloat())
    return emitError() << "expects an integer or float element type, got "
                       << elementType;
  if (box.empty() || box.size() > 5)
    return emitError() << "expects a box of 1 to 5 dims, got " << box.size();
  for (int64_t edge : box)
    if (edge < 1 || edge > 256)
      return emitError() << "expects box edges of 1 to 256 elements, got "
                         << edge;
  if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
    return emitError() << "expects a swizzle of 0, 32, 64 or 128 bytes, got "
                       << swizzle;
  int64_t innerBytes = box.back() * elementType.getIntOrFloatBitWidth() / 8;
  if (innerBytes % 16 != 0)
    return emitError() << "expects the innermost box edge to be a multiple of "
                          "16 bytes, got "
                       << innerBytes;
  if (swizzle != 0 && innerBytes > swizzle)
    return emitError() << "expects the innermost box edge (" << innerBytes
                       << " bytes) to fit in the " << swizzle
                       << "-byte swizzle span";
  return success();
}
