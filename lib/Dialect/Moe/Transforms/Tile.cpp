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
    getOperation()->walk([&](GroupedMatmulOp op) {
      if (!op.getConfigAttr())
        op.setConfigAttr(chooseGemmConfig(op, tokens));
    });
  }
};
} // namespace
