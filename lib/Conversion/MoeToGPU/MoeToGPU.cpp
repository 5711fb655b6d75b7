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
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Triple.h"

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

/// Checks that `function` takes and returns ranked tensors only, of whole
/// bytes: each is a buffer of the plan (a tensor map, a scalar, a memref or
/// an i22 tensor is not).
LogicalResult checkSignature(func::FuncOp function) {
  auto check = [&](Type type, StringRef kind, unsigned index) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    Type element = tensor ? tensor.getElementType() : Type();
    if (element && element.isIntOrFloat() &&
        element.getIntOrFloatBitWidth() % 8 == 0)
      return success();
    return function.emitError()
           << "convert-moe-to-gpu: " << kind << " #" << index
           << " of the layer function is " << type
           << ", not a ranked tensor of whole-byte elements (a buffer the "
              "caller passes)";
  };
  for (auto [index, type] : llvm::enumerate(function.getArgumentTypes()))
    if (failed(check(type, "argument", index)))
      return failure();
  for (auto [index, type] : llvm::enumerate(function.getResultTypes()))
    if (failed(check(type, "result", index)))
      return failure();
  return success();
}

/// Checks that the routing of every op of `function` at `tokensMax` tokens
/// fits the kernels' i32 slot ids and rows (MoeLimits.h).
LogicalResult checkRoutingAt(func::FuncOp function, int64_t tokensMax) {
  std::string cause =
      "convert-moe-to-gpu: tokens-max = " + std::to_string(tokensMax);
  auto check = [&](Operation *op, int64_t slots, int64_t experts,
                   int64_t blockM) {
    return verifyRoutingCapacity([&] { return op->emitOpError(); }, cause,
                                 tokensMax, slots, experts, blockM);
  };
  WalkResult result = function.walk([&](Operation *op) {
    LogicalResult checked =
        TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](RouteOp route) {
              return check(route,
                           cast<RankedTensorType>(route.getIds().getType())
                               .getDimSize(1),
                           route.getNumExperts(), route.getBlockM());
            })
            .Case([&](GroupedMatmulOp gemm) {
              return check(gemm, gemm.getNumSlots(), gemm.getNumStoredExperts(),
                           gemm.getBlockM());
            })
            .Default(success());
    return failed(checked) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

/// Makes `slice`, the part of an exchange buffer argument that its own rank
/// holds (the experts and combine phases of moe-expert-parallel), name the
/// buffer of that argument, whose dims are that slice's: a rank's kernels
/// read their own slice as a plain buffer. Any other slice is refused.
LogicalResult viewRankSlice(PlanBuilder &plan, tensor::ExtractSliceOp slice) {
  ExpertParallelAttr exchange = plan.exchangeOf(plan.use(slice.getSource()));
  auto sourceType = slice.getSourceType();
  auto isRankSlice = [&] {
    SmallVector<int64_t> offsets(sourceType.getRank(), 0), sizes;
    offsets[0] = exchange.getRank();
    sizes.push_back(1);
    llvm::append_range(sizes, sourceType.getShape().drop_front());
    return slice.getStaticOffsets() == ArrayRef<int64_t>(offsets) &&
           slice.getStaticSizes() == ArrayRef<int64_t>(sizes) &&
           llvm::all_of(slice.getStaticStrides(),
                        [](int64_t stride) { return stride == 1; }) &&
           slice.getType().getShape() == sourceType.getShape().drop_front();
  };
  if (!exchange || !isRankSlice())
    return slice.emitOpError()
           << "is not a rank's own slice [rank, 0, ...] of an exchange buffer "
              "argument (marked 'moe.exchange'), the one slice a rank's "
              "kernels read as a buffer (convert-moe-to-gpu)";
  plan.alias(slice.getResult(), slice.getSource());
  return success();
}

/// Whether a route's kernel computes `gate` (getFusedGate).
bool fusedIntoRoute(GateOp gate, int64_t choiceTokens) {
  return llvm::any_of(gate->getUsers(), [&](Operation *user) {
    auto route = dyn_cast<RouteOp>(user);
    return route && getFusedGate(route, choiceTokens) == gate;
  });
}

/// Whether LLVM's NVPTX back end has the subtarget feature `name`.
bool nvptxHasFeature(StringRef name) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTargetMC();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return false;
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(triple, kDefaultChip, ""));
  return subtarget &&
         llvm::any_of(subtarget->getAllProcessorFeatures(),
                      [&](const llvm::SubtargetFeatureKV &feature) {
                        return name == feature.Key;
                      });
}

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
                         << functions.size()
                         << " (an expert-parallel layer's phases compile one "
                            "at a time: moe-gpu-pipeline's phase, moe-compile "
                            "--phase)";
      return signalPassFailure();
    }
    if (std::optional<std::string> error = checkKernelTarget(chip, features)) {
      module.emitError() << "convert-moe-to-gpu: " << *error;
      return signalPassFailure();
    }
    for (auto [name, value, most] :
         {std::tuple<StringRef, int64_t, int64_t>{"tokens-max", tokensMax,
                                                  kMaxSize},
          {"num-sms", numSMs, kMaxMultiprocessors}}) {
      if (std::optional<std::string> bad =
              checkSizeOption(name, value, 1, most)) {
        module.emitError() << "convert-moe-to-gpu: " << *bad;
        return signalPassFailure();
      }
    }
    if (std::optional<std::string> bad =
            checkSizeOption("tokens", tokens, 0, tokensMax)) {
      module.emitError() << "convert-moe-to-gpu: " << *bad;
      return signalPassFailure();
    }
    int64_t choiceTokens = tokens ? tokens : tokensMax;
    func::FuncOp function = functions.front();
    if (failed(checkSignature(function)) ||
        failed(checkRoutingAt(function, tokensMax)))
      return signalPassFailure();
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
                if (!fusedIntoRoute(gate, choiceTokens))
                  return emitGate(plan, builder, gate);
                defineGateOutputs(plan, gate);
                return success();
              })
              .Case([&](RouteOp route) -> LogicalResult {
                return emitRoute(plan, builder, route, choiceTokens);
              })
              .Case([&](CombineOp combine) -> LogicalResult {
                emitCombine(plan, builder, combine);
                return success();
              })
              .Case([&](EpDispatchOp dispatch) -> LogicalResult {
                return emitEpDispatch(plan, builder, dispatch);
              })
              .Case([&](EpRouteOp route) -> LogicalResult {
                return emitEpRoute(plan, builder, route);
              })
              .Case([&](EpCombineOp combine) -> LogicalResult {
                return emitEpCombine(plan, builder, combine);
              })
              .Case([&](EpSignalOp signal) -> LogicalResult {
                return emitEpSignal(plan, builder, signal);
              })
              .Case([&](EpWaitOp wait) -> LogicalResult {
                return emitEpWait(plan, builder, wait);
              })
              .Case([&](QuantizeOp quantize) -> LogicalResult {
                // Quantized by the epilogue of the GEMM it follows.
                auto gemm =
                    quantize.getInput().getDefiningOp<GroupedMatmulOp>();
                if (!gemm ||
                    getEpilogueQuantize(gemm, choiceTokens) != quantize)
                  emitQuantize(plan, builder, quantize);
                return success();
              })
              .Case([&](TensorMapOp map) -> LogicalResult {
                plan.defineTensorMap(map);
                return success();
              })
              .Case([&](GroupedMatmulOp gemm) -> LogicalResult {
                return emitGroupedMatmul(plan, builder, gemm, choiceTokens);
              })
              .Case([&](tensor::ExtractSliceOp slice) -> LogicalResult {
                return viewRankSlice(plan, slice);
              })
              .Case<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
                  [&](Operation *reshape) -> LogicalResult {
                    plan.view(reshape->getResult(0), reshape->getOperand(0));
                    return success();
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
    // A bundle must launch something (docs/BUNDLE.md).
    if (!plan.hasLaunches()) {
      function.emitError() << "convert-moe-to-gpu: @" << function.getName()
                           << " has no moe op: its kernels would launch "
                              "nothing";
      return signalPassFailure();
    }
    plan.finish(builder);
  }
};

} // namespace

std::optional<std::string> mlir::moe::checkKernelTarget(StringRef chip,
                                                        StringRef features) {
  if (!llvm::is_contained(kKnownChips, chip)) {
    std::string known;
    for (StringRef name : kKnownChips)
      known += (known.empty() ? "" : ", ") + name.str();
    return ("unknown chip '" + chip + "' (the kernels are for " + known + ")")
        .str();
  }
  StringRef ptx = features;
  int version = 0;
  if (features.empty() ||
      (ptx.consume_front("+ptx") && !ptx.getAsInteger(10, version) &&
       version >= kMinPtxVersion && nvptxHasFeature(features.drop_front())))
    return std::nullopt;
  return llvm::formatv("unsupported features '{0}': expected +ptxNN, a PTX "
                       "ISA from {1}.{2} (+ptx{3}) that LLVM's NVPTX back "
                       "end knows, or nothing for the chip's default",
                       features, kMinPtxVersion / 10, kMinPtxVersion % 10,
                       kMinPtxVersion)
      .str();
}
