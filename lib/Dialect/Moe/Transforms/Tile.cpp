//===- Tile.cpp - Choose the tile configuration of grouped matmuls --------===//

#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmConfigDatabase.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

#include <set>

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

  LogicalResult initialize(MLIRContext *context) override {
    if (configDatabase.empty())
      return success();
    llvm::Expected<GemmConfigDatabase> loaded =
        GemmConfigDatabase::load(configDatabase);
    if (!loaded)
      return emitError(UnknownLoc::get(context))
             << "moe-tile: " << llvm::toString(loaded.takeError());
    userDatabase = std::make_shared<GemmConfigDatabase>(std::move(*loaded));
    return success();
  }

  /// The tuned entry for `key`: the user's database first, then the shipped.
  const TunedGemmConfig *lookup(const GemmShapeKey &key) const {
    if (userDatabase)
      if (const TunedGemmConfig *tuned = userDatabase->lookup(key, tokens))
        return tuned;
    return GemmConfigDatabase::shipped().lookup(key, tokens);
  }

  void runOnOperation() override {
    if (failed(checkSizeOptions(
            getOperation(), "moe-tile",
            {{"tokens", tokens}, {"num-sms", numSMs, 1, kMaxMultiprocessors}})))
      return signalPassFailure();
    auto *dialect = getContext().getLoadedDialect<MoeDialect>();
    std::set<GemmShapeKey> reported;
    WalkResult result = getOperation()->walk([&](GroupedMatmulOp op) {
      // Ops the tensor-core kernel cannot run (f32, rows TMA cannot
      // address, routing blocks no config describes) lower to the SIMT
      // kernel, which a config does not shape.
      if (op.getConfigAttr() || !hasTensorCoreKernel(op))
        return WalkResult::advance();
      auto emitError = [&] { return op.emitOpError() << "moe-tile: "; };
      GemmConfigAttr heuristic = chooseGemmConfig(op, tokens, numSMs);
      GemmShapeKey key = GemmShapeKey::of(op, device);
      GemmConfigAttr config;
      const TunedGemmConfig *tuned = lookup(key);
      if (tuned && !tuned->heuristic) {
        config = applyChanges(heuristic, tuned->changes, emitError);
        if (config)
          dialect->getTunedAttrHelper().setAttr(op,
                                                UnitAttr::get(&getContext()));
      } else {
        // No entry, or one saying the heuristic measured fastest at this
        // bucket: the heuristic's config, not final (moe-split-k may split
        // it, as it did when it was measured).
        GemmConfigChanges overrides;
        if (blockN)
          overrides.blockN = blockN;
        if (numStages)
          overrides.numStages = numStages;
        config = applyChanges(heuristic, overrides, emitError);
        if (config && !tuned && reported.insert(key).second)
          op.emitWarning() << "moe-tile: no tuned config for " << key.str()
                           << " near " << tokens.getValue()
                           << " tokens: using the heuristic's " << config;
      }
      if (!config)
        return WalkResult::interrupt();
      op.setConfigAttr(config);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  /// Shared by the clones the pass manager makes for parallel runs.
  std::shared_ptr<const GemmConfigDatabase> userDatabase;
};
} // namespace
