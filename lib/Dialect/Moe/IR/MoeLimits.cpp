//===- MoeLimits.cpp - The largest sizes a moe layer may have -------------===//

#include "moe/Dialect/Moe/IR/MoeLimits.h"

#include "mlir/IR/Operation.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;

std::optional<int64_t> mlir::moe::getMaxTensorBytes(RankedTensorType type) {
  std::optional<int64_t> bytes =
      llvm::divideCeil(type.getElementTypeBitWidth(), 8);
  for (int64_t dim : type.getShape())
    if (bytes)
      bytes =
          llvm::checkedMul(*bytes, ShapedType::isDynamic(dim) ? kMaxSize : dim);
  return bytes;
}

std::optional<int64_t> mlir::moe::getRoutingCapacity(int64_t tokens,
                                                     int64_t slots,
                                                     int64_t experts,
                                                     int64_t blockM) {
  if (tokens < 0 || slots < 0 || experts < 0 || blockM < 1)
    return std::nullopt;
  std::optional<int64_t> padding = llvm::checkedMul(experts, blockM - 1);
  std::optional<int64_t> capacity =
      padding ? llvm::checkedMulAdd(tokens, slots, *padding) : std::nullopt;
  if (!capacity || *capacity > kMaxSize)
    return std::nullopt;
  return capacity;
}

std::optional<std::string> mlir::moe::describeRoutingOverflow(int64_t tokens,
                                                              int64_t slots,
                                                              int64_t experts,
                                                              int64_t blockM) {
  if (getRoutingCapacity(tokens, slots, experts, blockM))
    return std::nullopt;
  std::string text;
  llvm::raw_string_ostream os(text);
  if (experts == 0 || blockM == 1)
    os << "T*S = " << tokens << "*" << slots << " routed slots";
  else
    os << "T*S + E*(block_m-1) = " << tokens << "*" << slots << " + " << experts
       << "*(" << blockM << "-1) routed rows";
  os << " exceed " << kMaxSize << " (the kernels' slot ids and rows are i32)";
  return text;
}

LogicalResult mlir::moe::verifyRoutingCapacity(
    function_ref<InFlightDiagnostic()> emitError, const Twine &cause,
    int64_t tokens, int64_t slots, int64_t experts, int64_t blockM) {
  std::optional<std::string> overflow =
      describeRoutingOverflow(tokens, slots, experts, blockM);
  if (!overflow)
    return success();
  return emitError() << cause << ": " << *overflow;
}

std::optional<std::string> mlir::moe::checkSizeOption(StringRef name,
                                                      int64_t value,
                                                      int64_t least,
                                                      int64_t most) {
  if (value >= least && value <= most)
    return std::nullopt;
  return (name + " must be in [" + Twine(least) + ", " + Twine(most) +
          "], got " + Twine(value))
      .str();
}

LogicalResult mlir::moe::checkSizeOptions(Operation *op, StringRef pass,
                                          ArrayRef<SizeOption> options) {
  for (const SizeOption &option : options)
    if (std::optional<std::string> bad = checkSizeOption(
            option.name, option.value, option.least, option.most))
      return op->emitError() << pass << ": " << *bad;
  return success();
}

LogicalResult mlir::moe::verifyBoundedTensorSizes(Operation *op) {
  auto check = [&](Type type, StringRef kind, unsigned index) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor)
      return success();
    for (int64_t dim : tensor.getShape())
      if (!ShapedType::isDynamic(dim) && (dim < 1 || dim > kMaxSize))
        return op->emitOpError()
               << "expects static sizes in [1, " << kMaxSize << "], got "
               << tensor << " for " << kind << " #" << index;
    if (!getMaxTensorBytes(tensor))
      return op->emitOpError()
             << "expects tensors of fewer than 2^63 bytes (a dynamic size "
             << "counted as " << kMaxSize << "), got " << tensor << " for "
             << kind << " #" << index;
    return success();
  };
  for (auto [index, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(check(type, "operand", index)))
      return failure();
  for (auto [index, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(check(type, "result", index)))
      return failure();
  return success();
}
