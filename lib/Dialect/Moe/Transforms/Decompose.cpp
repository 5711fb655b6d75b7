//===- Decompose.cpp - moe.fused_moe into primitive ops -------------------===//

#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"
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
/// Pattern: fused_moe(x, logits, w13, w2, bias) =>
///   combine(grouped_matmul(grouped_matmul(x, w13, route(gate(logits, bias))),
///                          w2, routed weights))
struct DecomposeFusedMoe : OpRewritePattern<FusedMoeOp> {
  DecomposeFusedMoe(MLIRContext *context, int64_t rowsPerBlock, int64_t tokens)
      : OpRewritePattern(context), rowsPerBlock(rowsPerBlock), tokens(tokens) {}

  LogicalResult matchAndRewrite(FusedMoeOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto hiddenType = cast<RankedTensorType>(op.getHiddenStates().getType());
    auto w13Type = cast<RankedTensorType>(op.getW13().getType());
    Type elementType = hiddenType.getElementType();
    Type f32 = rewriter.getF32Type(), i32 = rewriter.getI32Type();
    int64_t numTokens = hiddenType.getDimSize(0);
    int64_t hiddenSize = hiddenType.getDimSize(1);
    int64_t storedExperts = w13Type.getDimSize(0);
    int64_t intermediate = w13Type.getDimSize(1) / 2;
    RouterAttr router = op.getRouter();
    int64_t numSlots = router.getNumSlots();
    int64_t blockM = rowsPerBlock
                         ? rowsPerBlock
                         : chooseRoutingBlockM(tokens, numSlots, storedExperts);

    auto slotType = [&](Type type) {
      return RankedTensorType::get({numTokens, numSlots}, type);
    };
    auto gate =
        GateOp::create(rewriter, loc, slotType(f32), slotType(i32),
                       op.getRouterLogits(), op.getCorrectionBias(), router);

    bool dynamicTokens = ShapedType::isDynamic(numTokens);
    int64_t capacity = RouteOp::getCapacity(
        dynamicTokens ? ShapedType::kDynamic : numTokens * numSlots,
        storedExperts, blockM);
    int64_t numBlocks = dynamicTokens ? ShapedType::kDynamic
                                      : llvm::divideCeil(capacity, blockM);
    auto route = RouteOp::create(
        rewriter, loc, RankedTensorType::get({capacity}, i32),
        RankedTensorType::get({numBlocks}, i32), RankedTensorType::get({}, i32),
        gate.getIds(), storedExperts, blockM);

    auto gateUp = GroupedMatmulOp::create(
        rewriter, loc,
        RankedTensorType::get({capacity, intermediate}, elementType),
        op.getHiddenStates(), op.getW13(), route.getSortedIds(),
        route.getExpertIds(), route.getNumPadded(), /*routed_weights=*/Value(),
        /*input_map=*/Value(), /*weights_map=*/Value(), blockM, numSlots,
        RowOrder::token, RowOrder::sorted, op.getActivation(),
        /*config=*/GemmConfigAttr());
    auto down = GroupedMatmulOp::create(
        rewriter, loc,
        RankedTensorType::get({numTokens, numSlots, hiddenSize}, elementType),
        gateUp.getOutput(), op.getW2(), route.getSortedIds(),
        route.getExpertIds(), route.getNumPadded(), gate.getWeights(),
        /*input_map=*/Value(), /*weights_map=*/Value(), blockM, numSlots,
        RowOrder::sorted, RowOrder::slot, Activation::none,
        /*config=*/GemmConfigAttr());
    rewriter.replaceOpWithNewOp<CombineOp>(op, op.getType(), down.getOutput(),
                                           /*weights=*/Value());
    return success();
  }

  /// 0: chosen for `tokens` (chooseRoutingBlockM).
  int64_t rowsPerBlock;
  int64_t tokens;
};

struct MoeDecomposePass : moe::impl::MoeDecomposeBase<MoeDecomposePass> {
  using Base::Base;

  void runOnOperation() override {
    if (blockM < 0 || tokens < 1) {
      getOperation()->emitError()
          << "moe-decompose: block-m must be positive (or 0: chosen for "
             "`tokens`) and tokens positive, got block-m="
          << blockM.getValue() << " tokens=" << tokens.getValue();
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    patterns.add<DecomposeFusedMoe>(&getContext(), blockM, tokens);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};
} // namespace
