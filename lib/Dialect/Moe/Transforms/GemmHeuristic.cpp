//===- GemmHeuristic.cpp - Default tile configurations --------------------===//

#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"

using namespace mlir;
using namespace mlir::moe;

/// The K tile spans the 128-byte swizzle of the shared-memory tiles.
static constexpr int64_t kSwizzleBytes = 128;

GemmConfigAttr mlir::moe::chooseGemmConfig(GroupedMatmulOp op, int64_t tokens) {
  (void)tokens;
  int64_t elementBytes = op.getWeightsType().getElementTypeBitWidth() / 8;
  int64_t blockK = std::max<int64_t>(16, kSwizzleBytes / elementBytes);
  return GemmConfigAttr::get(
      op.getContext(), op.getBlockM(), /*block_n=*/128, blockK,
      /*num_stages=*/4, /*num_warpgroups=*/1, /*split_k=*/1,
      /*tma_a=*/op.getInputOrder() == RowOrder::sorted, /*tma_b=*/true,
      /*cluster_m=*/1, /*cluster_n=*/1, /*persistent=*/false);
}
