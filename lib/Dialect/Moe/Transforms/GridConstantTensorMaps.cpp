//===- GridConstantTensorMaps.cpp - TMA descriptors as grid constants -----===//

#include "moe/Dialect/Moe/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOEGRIDCONSTANTTENSORMAPS
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {
/// sizeof(CUtensorMap) and its required alignment.
constexpr unsigned kTensorMapBytes = 128, kTensorMapAlignment = 64;

/// Marks the arguments that `moe.grid_constant_args` lists (distinct
/// pointers of a kernel, as the moe dialect verifies) as by-value grid
/// constants.
void passTensorMapsByValue(LLVM::LLVMFuncOp func, DenseI64ArrayAttr indices) {
  MLIRContext *context = func.getContext();
  Builder builder(context);
  auto bytes =
      LLVM::LLVMArrayType::get(IntegerType::get(context, 8), kTensorMapBytes);
  for (int64_t index : indices.asArrayRef()) {
    func.setArgAttr(index, LLVM::LLVMDialect::getByValAttrName(),
                    TypeAttr::get(bytes));
    func.setArgAttr(index, LLVM::LLVMDialect::getAlignAttrName(),
                    builder.getI64IntegerAttr(kTensorMapAlignment));
    func.setArgAttr(index, NVVM::NVVMDialect::getGridConstantAttrName(),
                    builder.getUnitAttr());
  }
}

struct MoeGridConstantTensorMapsPass
    : moe::impl::MoeGridConstantTensorMapsBase<MoeGridConstantTensorMapsPass> {
  void runOnOperation() override {
    auto gridConstantArgs = getContext()
                                .getLoadedDialect<MoeDialect>()
                                ->getGridConstantArgsAttrHelper();
    getOperation().walk([&](LLVM::LLVMFuncOp func) {
      if (DenseI64ArrayAttr indices = gridConstantArgs.getAttr(func)) {
        passTensorMapsByValue(func, indices);
        gridConstantArgs.removeAttr(func);
      }
    });
  }
};
} // namespace
