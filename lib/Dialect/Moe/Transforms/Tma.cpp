//===- Tma.cpp - TMA descriptors of the grouped matmuls' tile loads -------===//

#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOETMA
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {
struct MoeTmaPass : moe::impl::MoeTmaBase<MoeTmaPass> {
  using Base::Base;

  void runOnOperation() override {
    // One map per (tensor, box, swizzle), however many ops load through it.
    DenseMap<std::pair<Value, Type>, Value> maps;
    getOperation()->walk([&](TensorMapOp map) {
      maps.try_emplace({map.getSource(), map.getType()}, map.getMap());
    });
    // The map of `source` with `box`, created where `source` is defined so
    // that it dominates every op that may share it; null after a diagnostic.
    auto mapOf = [&](GroupedMatmulOp op, Value source, ArrayRef<int64_t> box,
                     int64_t swizzle) -> Value {
      auto type = TensorMapType::getChecked(
          [&] { return op.emitOpError() << "moe-tma: "; }, &getContext(),
          getElementTypeOrSelf(source.getType()), box, swizzle);
      if (!type)
        return Value();
      auto [found, inserted] = maps.try_emplace({source, type}, Value());
      if (!inserted)
        return found->second;
      // After the definition, or the block's leading maps for an argument
      // (keeping the maps in the order their ops are met).
      OpBuilder builder(&getContext());
      if (Operation *definition = source.getDefiningOp()) {
        builder.setInsertionPointAfter(definition);
      } else {
        Block *block = cast<BlockArgument>(source).getOwner();
        auto firstOther = llvm::find_if(
            *block, [](Operation &op) { return !isa<TensorMapOp>(op); });
        builder.setInsertionPoint(block, firstOther);
      }
      found->second =
          TensorMapOp::create(builder, source.getLoc(), type, source).getMap();
      return found->second;
    };
    WalkResult result = getOperation()->walk([&](GroupedMatmulOp op) {
      GemmConfigAttr config = op.getConfigAttr();
      if (!config)
        return WalkResult::advance();
      if (config.getTmaB() && !op.getWeightsMap()) {
        Value map = mapOf(op, op.getWeights(), getWeightsTmaBox(op, config),
                          getWeightsSwizzleBytes(op, config));
        if (!map)
          return WalkResult::interrupt();
        op.getWeightsMapMutable().assign(map);
      }
      if (config.getTmaA() && op.getInputOrder() == RowOrder::sorted &&
          !op.getInputMap()) {
        Value map = mapOf(op, op.getInput(), getInputTmaBox(config),
                          getTileSwizzleBytes(op, config));
        if (!map)
          return WalkResult::interrupt();
        op.getInputMapMutable().assign(map);
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
