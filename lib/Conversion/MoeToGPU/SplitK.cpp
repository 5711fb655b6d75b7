//===- SplitK.cpp - Split-K partial sums and their reduction --------------===//
//
// With split_k > 1 each split of the wgmma kernel stores its fp32 partial
// sums per routed slot (and the first split each slot's sorted row); a
// second kernel adds the splits in split order and runs the epilogue. Every
// routed slot is written by each split, so the workspaces need no zeroing,
// and the sum's order does not depend on timing. A slot the routing gave no
// row (its id out of range, see moe.fused_experts) is written by no split:
// the reduction knows the routed slots as those whose recorded row maps back
// to them in sorted_ids, which stale or garbage rows cannot fake.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"
#include "Hopper.h"

#include "moe/Conversion/MoeCommon/RoutingMath.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {
constexpr int64_t kReduceThreads = 256;
} // namespace

ReductionBuffers mlir::moe::detail::defineReductionBuffers(PlanBuilder &plan,
                                                           OpBuilder &builder,
                                                           GroupedMatmulOp op,
                                                           int64_t splits) {
  return ReductionBuffers{
      plan.scratch("gemm_partials", builder.getF32Type(),
                   {PlanBuilder::constant(splits), routedSlots(plan, op),
                    PlanBuilder::constant(op.getWeightsType().getDimSize(1))}),
      plan.scratch("gemm_slot_rows", builder.getI32Type(),
                   {routedSlots(plan, op)})};
}

/// Stores every accumulator register of the thread's routed rows as split
/// `split`'s partial sum of its slot and weight row (gate rows, then up rows,
/// as the weights hold them); the first split also records each slot's
/// sorted row.
void mlir::moe::detail::storePartials(LoopBuilder &wb,
                                      const SplitPartials &partials,
                                      SlotOfRow slotOf, Value partialsBuffer,
                                      Value slotRows, GroupedMatmulOp op,
                                      GemmConfigAttr config) {
  ImplicitLocOpBuilder &b = wb.b;
  Value accumulators = partials.accumulators, laneRow = partials.laneRow;
  Value laneColumn = partials.laneColumn, firstRow = partials.firstRow;
  Value firstColumn = partials.firstColumn, split = partials.split;
  bool gated = op.isGated();
  int64_t columns = op.getOutputColumns(), blockN = config.getBlockN();
  int64_t blocksPerHalf = gated ? blockN / 16 : blockN / 8;
  for (int64_t half = 0; half < 2; ++half) {
    Value rowInBlock = arith::AddIOp::create(b, laneRow, wb.index(half * 8));
    auto [rowSlot, rowRouted] = slotOf(rowInBlock);
    Value slot = rowSlot, routed = rowRouted;
    wb.ifThen(routed, [&] {
      wb.ifThen(arith::AndIOp::create(
                    b, wb.cmpi(arith::CmpIPredicate::eq, split, wb.index(0)),
                    wb.cmpi(arith::CmpIPredicate::eq, laneColumn, wb.index(0))),
                [&] {
                  wb.store(
                      wb.toI32(arith::AddIOp::create(b, firstRow, rowInBlock)),
                      slotRows, {slot});
                });
      for (int64_t block = 0; block < blockN / 8; ++block) {
        // Column of the block's output (gate and up halves alike).
        int64_t blockInHalf = block % blocksPerHalf;
        int64_t halfOffset = block / blocksPerHalf * columns;
        for (int64_t i = 0; i < 2; ++i) {
          Value column = arith::AddIOp::create(
              b, firstColumn,
              arith::AddIOp::create(b, laneColumn,
                                    wb.index(blockInHalf * 8 + i)));
          Value value = LLVM::ExtractValueOp::create(
              b, accumulators, AccumulatorFragment::registerOf(block, half, i));
          wb.ifThen(
              wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
              [&] {
                wb.store(
                    value, partialsBuffer,
                    {split, slot,
                     arith::AddIOp::create(b, column, wb.index(halfOffset))});
              });
        }
      }
    });
  }
}

/// One thread per (routed slot, output column) adds the splits' partial sums
/// in split order, then runs the op's epilogue (bias, once, on the whole
/// sum; gated activation; routed weight) and stores in the op's row order.
void mlir::moe::detail::emitSplitReduction(PlanBuilder &plan,
                                           OpBuilder &builder,
                                           GroupedMatmulOp op, int64_t splits,
                                           const ReductionBuffers &buffers) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t columns = op.getOutputColumns(), slots = op.getNumSlots();
  bool gated = op.isGated(),
       weighted = static_cast<bool>(op.getRoutedWeights()),
       biased = static_cast<bool>(op.getBias());
  bool slotOutput = op.getOutputOrder() == RowOrder::slot;
  KernelArgList args;
  unsigned partialsArg = args.add(buffers.partials);
  unsigned slotRowsArg = args.add(buffers.slotRows);
  unsigned sortedIdsArg = args.add(plan.use(op.getSortedIds()));
  unsigned numPaddedArg = args.add(plan.use(op.getNumPadded()));
  std::optional<unsigned> routedWeightsArg =
      args.addIf(weighted, [&] { return plan.use(op.getRoutedWeights()); });
  // The bias of a row's expert, which expert_ids gives per row block.
  std::optional<unsigned> biasArg =
      args.addIf(biased, [&] { return plan.use(op.getBias()); });
  std::optional<unsigned> expertIdsArg =
      args.addIf(biased, [&] { return plan.use(op.getExpertIds()); });
  unsigned outputArg = args.add(defineOutput(plan, op));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul_reduce", args.get(),
      {PlanBuilder::ceilDiv(routedSlots(plan, op).times(columns),
                            kReduceThreads),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kReduceThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder wb{b};
  Value partials = kernel.getArgument(partialsArg);
  Value slotRows = kernel.getArgument(slotRowsArg);
  Value sortedIds = kernel.getArgument(sortedIdsArg);
  Value numPadded = kernel.getArgument(numPaddedArg);
  Value routedWeights = kernelArgument(kernel, routedWeightsArg);
  Value bias = kernelArgument(kernel, biasArg);
  Value expertIds = kernelArgument(kernel, expertIdsArg);
  Value output = kernel.getArgument(outputArg);
  Value routedSlots = routedSlotCount(wb, kernel, op);
  Value item = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kReduceThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value slot = arith::DivUIOp::create(b, item, wb.index(columns));
  Value column = arith::RemUIOp::create(b, item, wb.index(columns));
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, slot, routedSlots), [&] {
    Value row = wb.toIndex(wb.load(slotRows, {slot}));
    Value rowInRange = wb.cmpi(arith::CmpIPredicate::ult, row,
                               wb.toIndex(wb.load(numPadded, {})));
    Value safeRow = wb.select(rowInRange, row, wb.index(0));
    Value routed = arith::AndIOp::create(
        b, rowInRange,
        wb.cmpi(arith::CmpIPredicate::eq,
                wb.toIndex(wb.load(sortedIds, {safeRow})), slot));
    wb.ifThen(routed, [&] {
      Value expert =
          bias
              ? wb.toIndex(wb.load(
                    expertIds,
                    {arith::DivUIOp::create(b, row, wb.index(op.getBlockM()))}))
              : Value();
      auto sum = [&](Value weightRow) {
        Value total = wb.f32(0.0);
        for (int64_t split = 0; split < splits; ++split)
          total = arith::AddFOp::create(
              b, total, wb.load(partials, {wb.index(split), slot, weightRow}));
        if (bias)
          total = arith::AddFOp::create(b, total,
                                        wb.loadF32(bias, {expert, weightRow}));
        return total;
      };
      Value value = sum(column);
      if (gated)
        value = emitGatedPair(
            b, b.getLoc(), op.getActivation(), op.getSwigluAttr(), value,
            sum(arith::AddIOp::create(b, column, wb.index(columns))),
            kEpilogueFastMath);
      Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
      Value slotInToken = arith::RemUIOp::create(b, slot, wb.index(slots));
      if (weighted)
        value = arith::MulFOp::create(
            b, value, wb.load(routedWeights, {token, slotInToken}));
      if (slotOutput)
        wb.storeF32(value, output, {token, slotInToken, column});
      else
        wb.storeF32(value, output, {row, column});
    });
  });
}

/// One warpgroup per 64 rows of one expert x block_n accumulator columns
/// (one or two per block, plus a producer warpgroup when warp-specialized):
/// a ring of `num_stages` shared-memory stages filled by TMA through the
/// op's tensor maps (weights: one 3-D map over [E, N, K]; sorted rows: a 2-D
/// map over [C, K]) or cp.async row gathers (token rows), each stage's TMA
/// bytes counted in by its mbarrier; wgmma m64 x block_n x k16 with both
