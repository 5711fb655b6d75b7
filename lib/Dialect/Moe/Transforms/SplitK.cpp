//===- SplitK.cpp - Split the K loop of small grouped matmuls -------------===//

#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmConfigDatabase.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOESPLITK
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {
struct MoeSplitKPass : moe::impl::MoeSplitKBase<MoeSplitKPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(checkSizeOptions(
            getOperation(), "moe-split-k",
            {{"tokens", tokens}, {"num-sms", numSMs, 1, kMaxMultiprocessors}})))
      return signalPassFailure();
    auto *dialect = getContext().getLoadedDialect<MoeDialect>();
    WalkResult result = getOperation()->walk([&](GroupedMatmulOp op) {
      GemmConfigAttr config = op.getConfigAttr();
      // A stream-K grid balances its blocks by K itself.
      if (!config || config.getSplitK() > 1 || config.getStreamK() ||
          dialect->getTunedAttrHelper().isAttrPresent(op))
        return WalkResult::advance();
      // The heuristic counts the rows of `tokens` tokens.
      if (failed(verifyRoutingCapacity(
              [&] { return op.emitOpError(); },
              "moe-split-k: tokens = " + Twine(tokens.getValue()), tokens,
              op.getNumSlots(), op.getNumStoredExperts(), op.getBlockM())))
        return WalkResult::interrupt();
      GemmConfigChanges changes;
      changes.splitK = chooseSplitK(op, config, tokens, numSMs);
      if (*changes.splitK > 1)
        op.setConfigAttr(
            applyChanges(config, changes, [&] { return op.emitOpError(); }));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
