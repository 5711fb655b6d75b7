//===- Tile.cpp - Choose the tile configuration of grouped matmuls --------===//

#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOETILE
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {
struct MoeTilePass : moe::impl::MoeTileBase<MoeTilePass> {
  using Base::Base;

  void runOnOperation() override {
    if (tokens < 1) {
      getOperation()->emitError() << "moe-tile: tokens must be positive";
      return signalPassFailure();
    }
    WalkResult result = getOperation()->walk([&](GroupedMatmulOp op) {
      // Routing blocks no config can describe are left to the lowering.
      if (op.getConfigAttr() || !isDescribableBlockM(op.getBlockM()))
        return WalkResult::advance();
      GemmConfigAttr chosen = chooseGemmConfig(op, tokens);
      GemmConfigAttr config = GemmConfigAttr::getChecked(
          [&] { return op.emitOpError() << "moe-tile: "; }, op.getContext(),
          chosen.getBlockM(), blockN ? blockN : chosen.getBlockN(),
          chosen.getBlockK(), numStages ? numStages : chosen.getNumStages(),
          chosen.getNumWarpgroups(), chosen.getSplitK(), chosen.getTmaA(),
          chosen.getTmaB(), chosen.getClusterM(), chosen.getClusterN(),
          chosen.getPersistent());
      if (!config)
        return WalkResult::interrupt();
      op.setConfigAttr(config);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
