//===- MoeToGPU.cpp - moe ops to GPU kernels and a launch plan ------------===//

#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "Lowerings.h"
#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/Conversion/MoeCommon/RoutingMath.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_CONVERTMOETOGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

struct ConvertMoeToGPUPass
    : moe::impl::ConvertMoeToGPUBase<ConvertMoeToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> functions;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        functions.push_back(function);
    if (functions.size() != 1) {
      module.emitError() << "convert-moe-to-gpu: expected one layer function, "
                            "got "
                         << functions.size();
      return signalPassFailure();
    }
    if (tokensMax < 1 || numSMs < 1) {
      module.emitError()
          << "convert-moe-to-gpu: tokens-max and num-sms must be positive";
      return signalPassFailure();
    }
    func::FuncOp function = functions.front();
    OpBuilder builder(module.getContext());
    builder.setInsertionPointToEnd(module.getBody());
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    builder.getUnitAttr());
    auto target = NVVM::NVVMTargetAttr::get(
        module.getContext(), /*O=*/3, "nvptx64-nvidia-cuda", chip, features);
    auto kernels =
        gpu::GPUModuleOp::create(builder, function.getLoc(), kKernelModuleName,
                                 builder.getArrayAttr({target}));
    PlanBuilder plan(module, kernels, tokensMax, numSMs);
    for (BlockArgument argument : function.getArguments())
      plan.use(argument);
    WalkResult result = function.walk([&](Operation *op) {
      LogicalResult lowered =
          TypeSwitch<Operation *, LogicalResult>(op)
              .Case([&](GateOp gate) -> LogicalResult {
                return emitGate(plan, builder, gate);
              })
              .Case([&](RouteOp route) -> LogicalResult {
                return emitRoute(plan, builder, route);
              })
              .Case([&](CombineOp combine) -> LogicalResult {
                emitCombine(plan, builder, combine);
                return success();
              })
              .Case([&](QuantizeOp quantize) -> LogicalResult {
                emitQuantize(plan, builder, quantize);
                return success();
              })
              .Case([&](TensorMapOp map) -> LogicalResult {
                plan.defineTensorMap(map);
                return success();
              })
              .Case([&](GroupedMatmulOp gemm) -> LogicalResult {
                return emitGroupedMatmul(plan, builder, gemm);
              })
              .Case<FusedMoeOp, FusedExpertsOp>(
                  [&](Operation *fused) -> LogicalResult {
                    return fused->emitOpError()
                           << "must be decomposed first (moe-decompose)";
                  })
              .Case([&](func::ReturnOp ret) -> LogicalResult {
                plan.markOutputs(ret);
                return success();
              })
              .Default([&](Operation *other) -> LogicalResult {
                if (isa<func::FuncOp>(other))
                  return success();
                return other->emitOpError()
                       << "is not part of a moe layer (convert-moe-to-gpu)";
              });
      return failed(lowered) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    plan.finish(builder);
  }
};

} // namespace
