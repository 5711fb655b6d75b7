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
    if (tokens < 1 || numSMs < 1) {
      getOperation()->emitError()
          << "moe-split-k: tokens and num-sms must be positive";
      return signalPassFailure();
    }
    auto *dialect = getContext().getLoadedDialect<MoeDialect>();
    getOperation()->walk([&](GroupedMatmulOp op) {
      GemmConfigAttr config = op.getConfigAttr();
      if (!config || config.getSplitK() > 1 ||
          dialect->getTunedAttrHelper().isAttrPresent(op))
        return;
      GemmConfigChanges changes;
      changes.splitK = chooseSplitK(op, config, tokens, numSMs);
      if (*changes.splitK > 1)
        op.setConfigAttr(
            applyChanges(config, changes, [&] { return op.emitOpError(); }));
    });
  }
};
} // namespace
