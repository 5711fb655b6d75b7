//===- GroupedMatmul.cpp - moe.grouped_matmul to GPU kernels --------------===//
//
// Which kernel a grouped matmul gets (GroupedMatmul.h lists the files of
// each): the tensor-core kernel its #moe.gemm_config describes, once the
// config is checked against what that kernel can run, or the SIMT kernel.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"
#include "Hopper.h"
#include "Lowerings.h"

#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

std::optional<int64_t> mlir::moe::detail::getStaticTokens(GroupedMatmulOp op) {
  SmallVector<Value> tokenOrder;
  if (op.getInputOrder() == RowOrder::token)
    tokenOrder.push_back(op.getInput());
  if (op.getOutputOrder() == RowOrder::slot)
    tokenOrder.push_back(op.getOutput());
  if (Value weights = op.getRoutedWeights())
    tokenOrder.push_back(weights);
  for (Value value : tokenOrder) {
    int64_t tokens = cast<ShapedType>(value.getType()).getDimSize(0);
    if (!ShapedType::isDynamic(tokens))
      return tokens;
  }
  return std::nullopt;
}

SizeExpr mlir::moe::detail::gemmTokens(PlanBuilder &plan, GroupedMatmulOp op) {
  std::optional<int64_t> tokens = getStaticTokens(op);
  return tokens ? PlanBuilder::constant(*tokens) : plan.tokens();
}

SizeExpr mlir::moe::detail::routedSlots(PlanBuilder &plan, GroupedMatmulOp op) {
  return gemmTokens(plan, op).times(op.getNumSlots());
}

Value mlir::moe::detail::routedSlotCount(LoopBuilder &lb, gpu::GPUFuncOp kernel,
                                         GroupedMatmulOp op) {
  std::optional<int64_t> tokens = getStaticTokens(op);
  Value count = tokens ? lb.index(*tokens) : lb.toIndex(tokenCount(kernel));
  return arith::MulIOp::create(lb.b, count, lb.index(op.getNumSlots()));
}

SizeExpr mlir::moe::detail::routedCapacity(PlanBuilder &plan,
                                           GroupedMatmulOp op) {
  int64_t padding = op.getNumStoredExperts() * (op.getBlockM() - 1);
  if (std::optional<int64_t> tokens = getStaticTokens(op))
    return PlanBuilder::constant(*tokens * op.getNumSlots() + padding);
  return plan.affine(op.getNumSlots(), padding);
}

SizeExpr mlir::moe::detail::paddedRowsBound(PlanBuilder &plan,
                                            GroupedMatmulOp op) {
  int64_t experts = op.getNumStoredExperts(), padding = op.getBlockM() - 1;
  if (std::optional<int64_t> tokens = getStaticTokens(op)) {
    int64_t slots = *tokens * op.getNumSlots();
    return PlanBuilder::constant(slots + std::min(slots, experts) * padding);
  }
  SizeExpr slots = routedSlots(plan, op);
  return PlanBuilder::plus(slots,
                           PlanBuilder::min(slots, experts).times(padding));
}

Value mlir::moe::detail::paddedRowsBound(LoopBuilder &lb, Value routedSlots,
                                         GroupedMatmulOp op) {
  ImplicitLocOpBuilder &b = lb.b;
  Value nonEmpty = arith::MinUIOp::create(b, routedSlots,
                                          lb.index(op.getNumStoredExperts()));
  return arith::AddIOp::create(
      b, routedSlots,
      arith::MulIOp::create(b, nonEmpty, lb.index(op.getBlockM() - 1)));
}

GemmOperands mlir::moe::detail::useGemmOperands(PlanBuilder &plan,
                                                GroupedMatmulOp op) {
  int64_t blockM = op.getBlockM();
  GemmOperands operands{routedCapacity(plan, op), plan.use(op.getInput()),
                        plan.use(op.getSortedIds()),
                        plan.use(op.getExpertIds())};
  plan.refineInput(operands.sortedIds, {operands.capacity});
  plan.refineInput(operands.expertIds,
                   {PlanBuilder::ceilDiv(operands.capacity, blockM)});
  if (op.getInputOrder() == RowOrder::sorted)
    plan.refineInput(
        operands.rows,
        {operands.capacity, PlanBuilder::constant(op.getReductionSize())});
  return operands;
}

unsigned mlir::moe::detail::defineOutput(PlanBuilder &plan,
                                         GroupedMatmulOp op) {
  int64_t columns = op.getOutputColumns(), slots = op.getNumSlots();
  SmallVector<SizeExpr> dims =
      op.getOutputOrder() == RowOrder::slot
          ? SmallVector<SizeExpr>{gemmTokens(plan, op),
                                  PlanBuilder::constant(slots),
                                  PlanBuilder::constant(columns)}
          : SmallVector<SizeExpr>{routedCapacity(plan, op),
                                  PlanBuilder::constant(columns)};
  return plan.define(op.getOutput(), "gemm_output", dims);
}

namespace {

/// Whether the wgmma kernel can build the thread-block cluster of `config`:
/// two blocks along M (consecutive row blocks) that multicast their shared
/// weight tile, each loading half of it (whole 8-row swizzle atoms: boxes
/// are multiples of 16 rows). Their producers signal each other's consumers
/// through barriers that need warp specialization, one tile per block and
/// one K split.
LogicalResult checkCluster(GroupedMatmulOp op, GemmConfigAttr config,
                           function_ref<LogicalResult(const Twine &)> fail) {
  int64_t clusterM = config.getClusterM();
  if (config.getClusterN() != 1)
    return fail("cluster_n must be 1 (clusters pair row blocks, cluster_m)");
  if (clusterM == 1)
    return success();
  if (clusterM != 2)
    return fail("cluster_m must be 1 or 2");
  if (!config.getWarpSpecialized() || config.getPersistent() ||
      config.getSplitK() != 1 || hasPackedWeights(op))
    return fail("cluster_m = 2 needs warp_specialized, no persistent grid, "
                "split_k = 1 and unpacked weights");
  return success();
}

/// Whether the wgmma kernel can run `op` under `config`; else says why.
LogicalResult checkWgmmaConfig(GroupedMatmulOp op, GemmConfigAttr config) {
  int64_t elementBytes = getTileElementBytes(op);
  int64_t blockN = config.getBlockN();
  auto fail = [&](const Twine &why) {
    return op.emitOpError()
           << "has no wgmma lowering for " << config << ": " << why;
  };
  if (config.getBlockK() * elementBytes != kSwizzleBytes)
    return fail("block_k must span the 128-byte swizzle");
  if (blockN % 16 != 0 || blockN > 256 || (op.isGated() && blockN % 32 != 0))
    return fail("block_n must be a multiple of 16 (32 when gated) up to 256");
  if (config.getNumStages() < 3)
    return fail("num_stages must be at least 3");
  if (config.getNumWarpgroups() > 2)
    return fail("num_warpgroups must be 1 or 2");
  // The warpgroups of a block share its weight tile: their rows must be one
  // expert's, so one routing block must cover them all.
  if (config.getNumWarpgroups() > 1 && config.getNumWarpgroups() * kWgmmaRows >
                                           static_cast<int64_t>(op.getBlockM()))
    return fail("num_warpgroups = " + Twine(config.getNumWarpgroups()) +
                " needs routing blocks (block_m) of at least " +
                Twine(config.getNumWarpgroups() * kWgmmaRows) +
                " rows, so that a block's rows are one expert's");
  if (failed(checkCluster(op, config, fail)))
    return failure();
  int64_t numSteps =
      llvm::divideCeil(op.getReductionSize(), config.getBlockK());
  int64_t splits = config.getSplitK();
  if (!everySplitHasKTile(numSteps, splits))
    return fail("split_k must leave every split a K tile (" + Twine(numSteps) +
                " K tiles)");
  if (hasBlockScales(op)) {
    int64_t scaleBlock = op.getQuantizationAttr().getBlockSize();
    int64_t boxRows = getWeightBoxRows(op, config);
    if (config.getBlockK() != scaleBlock)
      return fail("block_k must be the scale block (" + Twine(scaleBlock) +
                  ") of block-scaled fp8 weights");
    if (blockN > 128)
      return fail("block_n must be at most 128 for block-scaled fp8 weights "
                  "(promotion holds a second set of accumulators)");
    // One weight scale per box and K tile: a box lies in one scale block.
    if (scaleBlock % boxRows != 0 ||
        (op.isGated() && op.getOutputColumns() % boxRows != 0))
      return fail("weight boxes of " + Twine(boxRows) + " rows must tile the " +
                  Twine(scaleBlock) + "-row scale blocks");
  }
  if (hasPackedWeights(op) && !config.getWarpSpecialized())
    return fail("mxfp4 weights need warp_specialized (its producer decodes "
                "them)");
  if (config.getTmaA() != (op.getInputOrder() == RowOrder::sorted))
    return fail("tma_a must be set exactly for sorted input rows");
  if (!config.getTmaB())
    return fail("tma_b must be set (weights load only by TMA)");
  return success();
}

/// Whether the op has the descriptors moe-tma made for `config`, with the
/// boxes the kernel's tiles have.
LogicalResult checkTensorMaps(GroupedMatmulOp op, GemmConfigAttr config) {
  auto checkMap = [&](Value map, StringRef name, Value source,
                      ArrayRef<int64_t> box, int64_t swizzle) -> LogicalResult {
    if (!map)
      return op.emitOpError() << "has no " << name
                              << " for its config's TMA loads (run moe-tma)";
    auto expected = TensorMapType::get(
        op.getContext(), getElementTypeOrSelf(source.getType()), box, swizzle);
    if (map.getType() != expected)
      return op.emitOpError() << "expects its " << name << " to be " << expected
                              << " for " << config << ", got " << map.getType();
    return success();
  };
  if (failed(checkMap(op.getWeightsMap(), "weights_map", op.getWeights(),
                      getWeightsTmaBox(op, config),
                      getWeightsSwizzleBytes(op, config))))
    return failure();
  if (config.getTmaA())
    return checkMap(op.getInputMap(), "input_map", op.getInput(),
                    getInputTmaBox(config), kSwizzleBytes);
  return success();
}

} // namespace

QuantizeOp mlir::moe::detail::getEpilogueQuantize(GroupedMatmulOp op,
                                                  int64_t tokens) {
  // Streaming decode weights, the first GEMM wants every block it can get:
  // fused, a block computes a group's column tiles in turn, and DeepSeek-V3
  // and Kimi-K2 fp8 layers lost 2-8 % at T = 1 and 16 (bench/RESULTS.md)
  // where they gain 1-3 % from T = 64 on.
  GemmConfigAttr config = op.getConfigAttr();
  if (!config || isWeightStreaming(op, tokens) || !op->hasOneUse() ||
      !hasTensorCoreKernel(op) || op.getOutputOrder() != RowOrder::sorted ||
      op.getRoutedWeights() || config.getSplitK() != 1 ||
      op.getOutputColumns() % 2 != 0)
    return {};
  auto quantize = dyn_cast<QuantizeOp>(*op->user_begin());
  if (!quantize || quantize.getInput() != op.getOutput() ||
      quantize.getNumRows() != op.getNumPadded())
    return {};
  if (quantize.getScale())
    return quantize;
  // A group is columns of whole column tiles held one after another, or a
  // tile holds whole groups of 8-column fragment blocks.
  int64_t group = quantize.getGroupSize();
  int64_t tileColumns =
      op.isGated() ? config.getBlockN() / 2 : config.getBlockN();
  bool groupSpansTiles = group % tileColumns == 0 &&
                         group / tileColumns <= kMaxQuantizedColumnTiles;
  bool tileSpansGroups = tileColumns % group == 0 && group % 8 == 0;
  // Stream-K sums the parts of a tile of one column tile: a group must lie
  // within it.
  if (config.getStreamK())
    return tileSpansGroups ? quantize : QuantizeOp();
  return groupSpansTiles || tileSpansGroups ? quantize : QuantizeOp();
}

bool mlir::moe::detail::rowsEvictLast(GroupedMatmulOp op, int64_t tokens) {
  constexpr int64_t kMaxRowBlocksPerExpert = 2;
  return !hasPackedWeights(op) &&
         tokens * static_cast<int64_t>(op.getNumSlots()) <=
             kMaxRowBlocksPerExpert * static_cast<int64_t>(op.getBlockM()) *
                 static_cast<int64_t>(op.getNumStoredExperts());
}

LogicalResult mlir::moe::detail::emitGroupedMatmul(PlanBuilder &plan,
                                                   OpBuilder &builder,
                                                   GroupedMatmulOp op,
                                                   int64_t tokens) {
  // The tensor-core kernel is built from the op's tiling (moe-tile) and
  // descriptors (moe-tma); ops it cannot run get the SIMT kernel.
  if (!hasTensorCoreKernel(op)) {
    if (op.getConfigAttr())
      return op.emitOpError() << "has a config but no tensor-core kernel "
                                 "(bf16/f16/fp8, rows of 16-byte multiples, a "
                                 "power-of-two block_m in [16, 256])";
    if (op.getQuantizationAttr())
      return op.emitOpError() << "has quantized operands, which only the "
                                 "tensor-core kernel runs (rows of 16-byte "
                                 "multiples, a power-of-two block_m; bf16 "
                                 "input rows for mxfp4 weights)";
    return emitSimtGroupedMatmul(plan, builder, op);
  }
  if (GemmConfigAttr config = op.getConfigAttr()) {
    if (failed(checkWgmmaConfig(op, config)) ||
        failed(checkTensorMaps(op, config)))
      return failure();
    emitWgmmaGroupedMatmul(plan, builder, op, config,
                           getEpilogueQuantize(op, tokens),
                           rowsEvictLast(op, tokens));
    return success();
  }
  return op.emitOpError()
         << "has no #moe.gemm_config for its tensor-core kernel (run moe-tile "
            "and moe-tma)";
}
