//===- Decompose.cpp - moe.fused_moe into primitive ops -------------------===//

#include "ExpertGemms.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOEDECOMPOSE
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {
/// The operands of a layer's experts once routing is known.
struct ExpertsOperands {
  Value hidden, ids, weights;
  ExpertMlp mlp;
  /// Whether ids may lie outside [0, E) (given by the caller, not a gate),
  /// so that the combine must skip those slots.
  bool idsMayBeOutOfRange;
};

/// The routing of a layer: T (maybe dynamic), S, the stored experts and
/// whether its fp8 weights are scaled in blocks.
struct RoutingSizes {
  int64_t numTokens, numSlots, storedExperts;
  bool blockScaled;

  template <typename LayerOp> static RoutingSizes of(LayerOp op) {
    int64_t numSlots;
    if constexpr (std::is_same_v<LayerOp, FusedMoeOp>)
      numSlots = op.getRouter().getNumSlots();
    else
      numSlots = cast<RankedTensorType>(op.getIds().getType()).getDimSize(1);
    QuantizationAttr quantization = op.getQuantizationAttr();
    return {
        cast<RankedTensorType>(op.getHiddenStates().getType()).getDimSize(0),
        numSlots, cast<RankedTensorType>(op.getW13().getType()).getDimSize(0),
        quantization && quantization.getWeights() == WeightScaling::block};
  }

  /// The routing block: `rowsPerBlock`, or chosen for `tokens` when 0.
  int64_t blockM(int64_t rowsPerBlock, int64_t tokens) const {
    return rowsPerBlock ? rowsPerBlock
                        : chooseRoutingBlockM(tokens, numSlots, storedExperts,
                                              blockScaled);
  }
};

/// Builds route -> the expert GEMMs -> combine for `experts` and returns
/// the combined [T, H], routed in blocks of `blockM` rows.
Value buildExperts(PatternRewriter &rewriter, Location loc,
                   const ExpertsOperands &experts, int64_t blockM) {
  auto hiddenType = cast<RankedTensorType>(experts.hidden.getType());
  auto idsType = cast<RankedTensorType>(experts.ids.getType());
  Type i32 = rewriter.getI32Type();
  int64_t numTokens = hiddenType.getDimSize(0);
  int64_t storedExperts =
      cast<RankedTensorType>(experts.mlp.w13.getType()).getDimSize(0);
  int64_t numSlots = idsType.getDimSize(1);

  bool dynamicTokens = ShapedType::isDynamic(numTokens);
  int64_t capacity = RouteOp::getCapacity(dynamicTokens ? ShapedType::kDynamic
                                                        : numTokens * numSlots,
                                          storedExperts, blockM);
  int64_t numBlocks =
      dynamicTokens ? ShapedType::kDynamic : llvm::divideCeil(capacity, blockM);
  auto route = RouteOp::create(
      rewriter, loc, RankedTensorType::get({capacity}, i32),
      RankedTensorType::get({numBlocks}, i32), RankedTensorType::get({}, i32),
      experts.ids, storedExperts, blockM);
  Value rows = buildExpertGemms(rewriter, loc, experts.hidden, experts.weights,
                                {route.getSortedIds(), route.getExpertIds(),
                                 route.getNumPadded(), blockM, numSlots},
                                experts.mlp);
  bool masked = experts.idsMayBeOutOfRange;
  return CombineOp::create(rewriter, loc, hiddenType, rows,
                           /*weights=*/Value(), masked ? experts.ids : Value(),
                           masked ? rewriter.getI64IntegerAttr(storedExperts)
                                  : IntegerAttr());
}

/// The experts of fused_moe(x, logits, w13, w2, bias): routed by a gate of
/// the logits, whose ids are in range by construction.
ExpertsOperands getExperts(FusedMoeOp op, PatternRewriter &rewriter) {
  Type f32 = rewriter.getF32Type(), i32 = rewriter.getI32Type();
  int64_t numTokens =
      cast<RankedTensorType>(op.getHiddenStates().getType()).getDimSize(0);
  RouterAttr router = op.getRouter();
  auto slotType = [&](Type type) {
    return RankedTensorType::get({numTokens, router.getNumSlots()}, type);
  };
  auto gate =
      GateOp::create(rewriter, op.getLoc(), slotType(f32), slotType(i32),
                     op.getRouterLogits(), op.getCorrectionBias(), router);
  return {op.getHiddenStates(), gate.getIds(), gate.getWeights(),
          ExpertMlp::of(op), /*idsMayBeOutOfRange=*/false};
}

/// The experts of fused_experts(x, ids, weights, w13, w2): the caller's
/// routing, whose ids may be out of range.
ExpertsOperands getExperts(FusedExpertsOp op, PatternRewriter &) {
  return {op.getHiddenStates(), op.getIds(), op.getWeights(), ExpertMlp::of(op),
          /*idsMayBeOutOfRange=*/true};
}

/// Pattern: fused_moe or fused_experts => buildExperts(getExperts(op)).
template <typename LayerOp> struct DecomposeLayer : OpRewritePattern<LayerOp> {
  DecomposeLayer(MLIRContext *context, int64_t rowsPerBlock, int64_t tokens)
      : OpRewritePattern<LayerOp>(context), rowsPerBlock(rowsPerBlock),
        tokens(tokens) {}

  LogicalResult matchAndRewrite(LayerOp op,
                                PatternRewriter &rewriter) const override {
    int64_t blockM = RoutingSizes::of(op).blockM(rowsPerBlock, tokens);
    rewriter.replaceOp(op, buildExperts(rewriter, op.getLoc(),
                                        getExperts(op, rewriter), blockM));
    return success();
  }

  /// 0: chosen for `tokens` (chooseRoutingBlockM).
  int64_t rowsPerBlock;
  int64_t tokens;
};

struct MoeDecomposePass : moe::impl::MoeDecomposeBase<MoeDecomposePass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(checkSizeOptions(getOperation(), "moe-decompose",
                                {{"block-m", blockM, 0}, {"tokens", tokens}})))
      return signalPassFailure();
    if (failed(checkNoExpertParallel()) || failed(checkRouting()))
      return signalPassFailure();
    RewritePatternSet patterns(&getContext());
    patterns.add<DecomposeLayer<FusedMoeOp>, DecomposeLayer<FusedExpertsOp>>(
        &getContext(), blockM, tokens);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }

  /// Checks that no layer is expert parallel: its weights are one rank's
  /// experts, which moe-expert-parallel's exchange must route to.
  LogicalResult checkNoExpertParallel() {
    WalkResult result = getOperation()->walk([](FusedMoeOp op) {
      if (!op.getExpertParallelAttr())
        return WalkResult::advance();
      op.emitOpError() << "moe-decompose: an expert-parallel layer is split "
                          "by moe-expert-parallel first";
      return WalkResult::interrupt();
    });
    return failure(result.wasInterrupted());
  }

  /// Checks that each layer's routing, in the blocks it gets, fits the
  /// kernels' i32 rows (MoeLimits.h).
  LogicalResult checkRouting() {
    WalkResult result = getOperation()->walk([&](Operation *op) {
      std::optional<RoutingSizes> sizes =
          TypeSwitch<Operation *, std::optional<RoutingSizes>>(op)
              .Case<FusedMoeOp, FusedExpertsOp>(
                  [](auto layer) { return RoutingSizes::of(layer); })
              .Default(std::nullopt);
      if (!sizes)
        return WalkResult::advance();
      int64_t rows = sizes->blockM(blockM, tokens);
      std::string cause =
          blockM ? "moe-decompose: block-m = " + std::to_string(rows)
                 : "moe-decompose: its routing block of " +
                       std::to_string(rows) + " rows";
      bool dynamicTokens = ShapedType::isDynamic(sizes->numTokens);
      return failed(verifyRoutingCapacity(
                 [&] { return op->emitOpError(); },
                 cause + (dynamicTokens ? " at one token" : ""),
                 dynamicTokens ? 1 : sizes->numTokens, sizes->numSlots,
                 sizes->storedExperts, rows))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    });
    return failure(result.wasInterrupted());
  }
};
} // namespace
