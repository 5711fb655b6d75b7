//===- GridConstantTensorMaps.cpp - TMA descriptors as grid constants -----===//

#include "moe/Dialect/Moe/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/SmallBitVector.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOEGRIDCONSTANTTENSORMAPS
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {
/// The kernel attribute listing the descriptor arguments.
constexpr llvm::StringLiteral kTensorMapsAttrName = "moe.tensor_maps";
/// sizeof(CUtensorMap) and its required alignment.
constexpr unsigned kTensorMapBytes = 128, kTensorMapAlignment = 64;

/// Marks the arguments that `moe.tensor_maps` lists as by-value grid
/// constants, after checking that they are pointers of a kernel, listed once.
LogicalResult passTensorMapsByValue(LLVM::LLVMFuncOp func,
                                    DenseI64ArrayAttr indices) {
  if (!func->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()))
    return func.emitOpError()
           << "has '" << kTensorMapsAttrName << "' but is not a kernel";
  unsigned numArguments = func.getNumArguments();
  llvm::SmallBitVector seen(numArguments);
  MLIRContext *context = func.getContext();
  Builder builder(context);
  auto bytes =
      LLVM::LLVMArrayType::get(IntegerType::get(context, 8), kTensorMapBytes);
  for (int64_t index : indices.asArrayRef()) {
    if (index < 0 || index >= numArguments)
      return func.emitOpError()
             << "'" << kTensorMapsAttrName << "' names argument " << index
             << " of a kernel with " << numArguments << " arguments";
    if (seen.test(index))
      return func.emitOpError() << "'" << kTensorMapsAttrName
                                << "' names argument " << index << " twice";
    seen.set(index);
    if (!isa<LLVM::LLVMPointerType>(func.getArgument(index).getType()))
      return func.emitOpError()
             << "'" << kTensorMapsAttrName << "' names argument " << index
             << " of type " << func.getArgument(index).getType()
             << ", not a pointer to a tensor map";
    func.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                    TypeAttr::get(bytes));
    func.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(),
                    builder.getI64IntegerAttr(kTensorMapAlignment));
    func.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(),
                    builder.getUnitAttr());
  }
  func->removeAttr(kTensorMapsAttrName);
  return success();
}

struct MoeGridConstantTensorMapsPass
    : moe::impl::MoeGridConstantTensorMapsBase<MoeGridConstantTensorMapsPass> {
  void runOnOperation() override {
    WalkResult result = getOperation().walk([](LLVM::LLVMFuncOp func) {
      Attribute attr = func->getAttr(kTensorMapsAttrName);
      if (!attr)
        return WalkResult::advance();
      auto indices = dyn_cast<DenseI64ArrayAttr>(attr);
      if (!indices) {
        func.emitOpError() << "expects '" << kTensorMapsAttrName
                           << "' to be an array<i64> of argument indices";
        return WalkResult::interrupt();
      }
      return failed(passTensorMapsByValue(func, indices))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
