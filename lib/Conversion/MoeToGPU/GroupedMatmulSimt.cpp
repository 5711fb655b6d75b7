//===- GroupedMatmulSimt.cpp - The SIMT grouped matmul kernel -------------===//
//
// The kernel of grouped matmuls the tensor cores cannot run (f32, rows that
// are not 16-byte multiples): the threads stage both operands in shared
// memory as f32 and multiply-add in K order, so that the sums round as the
// CPU loops' do.
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"

#include "moe/Conversion/MoeCommon/RoutingMath.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {
constexpr int64_t kGemmThreadsPerSide = 16;
constexpr int64_t kGemmTileN = 64, kGemmTileK = 16;
constexpr int64_t kGemmColumnsPerThread = kGemmTileN / kGemmThreadsPerSide;
} // namespace

/// A shared-memory tiled SIMT kernel: one block per (block_m rows of one
/// expert) x 64 columns, fp32 accumulation over K in order, the epilogue on
/// the accumulators. The correct baseline the tensor-core path is measured
/// against; gathered and sorted rows, padding rows skipped, both output
/// orders.
LogicalResult mlir::moe::detail::emitSimtGroupedMatmul(PlanBuilder &plan,
                                                       OpBuilder &builder,
                                                       GroupedMatmulOp op) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t numExperts = op.getNumStoredExperts(), k = op.getReductionSize();
  int64_t slots = op.getNumSlots(), blockM = op.getBlockM();
  Activation activation = op.getActivation();
  bool gated = op.isGated();
  int64_t columns = op.getOutputColumns();
  bool tokenInput = op.getInputOrder() == RowOrder::token;
  bool slotOutput = op.getOutputOrder() == RowOrder::slot;
  bool weighted = static_cast<bool>(op.getRoutedWeights());
  if (blockM % kGemmThreadsPerSide != 0 || blockM > 128)
    return op.emitOpError() << "has no GPU lowering for block_m " << blockM
                            << " (a multiple of 16 up to 128)";
  int64_t rowsPerThread = blockM / kGemmThreadsPerSide;
  int64_t threads = kGemmThreadsPerSide * kGemmThreadsPerSide;

  // The threads stage both operands (f32 and rows TMA cannot address have
  // no tensor-core kernel, so no TMA descriptors either).
  auto [capacity, rows, sortedIds, expertIds] = useGemmOperands(plan, op);
  KernelArgList args;
  unsigned inputArg = args.add(rows);
  unsigned weightsArg = args.add(plan.use(op.getWeights()));
  unsigned sortedIdsArg = args.add(sortedIds);
  unsigned expertIdsArg = args.add(expertIds);
  unsigned numPaddedArg = args.add(plan.use(op.getNumPadded()));
  std::optional<unsigned> routedWeightsArg =
      args.addIf(weighted, [&] { return plan.use(op.getRoutedWeights()); });
  unsigned outputArg = args.add(defineOutput(plan, op));
  Type f32 = builder.getF32Type();
  SmallVector<MemRefType> shared = {
      workgroupMemRef({blockM, kGemmTileK + 1}, f32),
      workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32)};
  if (gated)
    shared.push_back(workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul", args.get(),
      {PlanBuilder::constant(llvm::divideCeil(columns, kGemmTileN)),
       PlanBuilder::ceilDiv(capacity, blockM), PlanBuilder::constant(1)},
      {threads, 1, 1}, shared);

  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder wb{b};
  Value input = kernel.getArgument(inputArg);
  Value weights = kernel.getArgument(weightsArg);
  Value sorted = kernel.getArgument(sortedIdsArg);
  Value experts = kernel.getArgument(expertIdsArg);
  Value padded = kernel.getArgument(numPaddedArg);
  Value routedWeights = kernelArgument(kernel, routedWeightsArg);
  Value output = kernel.getArgument(outputArg);
  auto attributions = kernel.getWorkgroupAttributions();
  Value tileA = attributions[0], tileB = attributions[1];
  Value tileUp = gated ? Value(attributions[2]) : Value();
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value routedSlots = arith::MulIOp::create(b, numTokens, wb.index(slots));

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value tx = arith::RemUIOp::create(b, tid, wb.index(kGemmThreadsPerSide));
  Value ty = arith::DivUIOp::create(b, tid, wb.index(kGemmThreadsPerSide));
  Value rowBlock = gpu::BlockIdOp::create(b, gpu::Dimension::y);
  Value firstColumn = arith::MulIOp::create(
      b, gpu::BlockIdOp::create(b, gpu::Dimension::x), wb.index(kGemmTileN));
  Value firstRow = arith::MulIOp::create(b, rowBlock, wb.index(blockM));
  Value expert = wb.toIndex(wb.load(experts, rowBlock));
  // Blocks past the padded rows, or of no expert, have nothing to do; the
  // condition is uniform over the block, so its barriers stay matched.
  Value active = arith::AndIOp::create(
      b,
      wb.cmpi(arith::CmpIPredicate::ult, firstRow,
              wb.toIndex(wb.load(padded, {}))),
      wb.inRange(expert, wb.index(0), wb.index(numExperts)));
  // The slot of sorted row `row`, and whether it is a routed slot.
  auto slotOf = [&](Value row) -> std::pair<Value, Value> {
    Value slot = wb.toIndex(wb.load(sorted, row));
    return {slot, wb.inRange(slot, wb.index(0), routedSlots)};
  };
  wb.ifThen(active, [&] {
    Value zero = wb.f32(0.0);
    int64_t accumulators = rowsPerThread * kGemmColumnsPerThread;
    SmallVector<Value> inits(gated ? 2 * accumulators : accumulators, zero);
    SmallVector<Value> sums = wb.loop(
        wb.index(0), wb.index(k), inits,
        [&](Value k0, ValueRange carried) -> SmallVector<Value> {
          // Stage the A rows (gathered, zero for padding rows) and the B
          // columns of this K step in shared memory, as f32.
          for (int64_t base = 0; base < blockM * kGemmTileK; base += threads) {
            Value item = arith::AddIOp::create(b, tid, wb.index(base));
            Value i = arith::DivUIOp::create(b, item, wb.index(kGemmTileK));
            Value kk = arith::RemUIOp::create(b, item, wb.index(kGemmTileK));
            Value kIndex = arith::AddIOp::create(b, k0, kk);
            auto [slot, routed] = slotOf(arith::AddIOp::create(b, firstRow, i));
            Value source =
                tokenInput ? arith::DivUIOp::create(b, slot, wb.index(slots))
                                 .getResult()
                           : arith::AddIOp::create(b, firstRow, i).getResult();
            Value valid = arith::AndIOp::create(
                b, routed,
                wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k)));
            Value value =
                wb.loadF32(input, {wb.select(valid, source, wb.index(0)),
                                   wb.select(valid, kIndex, wb.index(0))});
            wb.store(wb.select(valid, value, zero), tileA, {i, kk});
          }
          for (int64_t base = 0; base < kGemmTileN * kGemmTileK;
               base += threads) {
            Value item = arith::AddIOp::create(b, tid, wb.index(base));
            Value jj = arith::DivUIOp::create(b, item, wb.index(kGemmTileK));
            Value kk = arith::RemUIOp::create(b, item, wb.index(kGemmTileK));
            Value column = arith::AddIOp::create(b, firstColumn, jj);
            Value kIndex = arith::AddIOp::create(b, k0, kk);
            Value valid = arith::AndIOp::create(
                b,
                wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
                wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k)));
            Value safeColumn = wb.select(valid, column, wb.index(0));
            Value safeK = wb.select(valid, kIndex, wb.index(0));
            // Weight (expert, column + tile * columns, k) of the step.
            auto weight = [&](int64_t tile) {
              return wb.loadF32(
                  weights, {expert,
                            arith::AddIOp::create(b, safeColumn,
                                                  wb.index(tile * columns)),
                            safeK});
            };
            wb.store(wb.select(valid, weight(0), zero), tileB, {jj, kk});
            if (gated)
              wb.store(wb.select(valid, weight(1), zero), tileUp, {jj, kk});
          }
          gpu::BarrierOp::create(b);
          SmallVector<Value> next(carried.begin(), carried.end());
          for (int64_t kk = 0; kk < kGemmTileK; ++kk) {
            Value kkIndex = wb.index(kk);
            SmallVector<Value> a, bGate, bUp;
            for (int64_t ri = 0; ri < rowsPerThread; ++ri)
              a.push_back(wb.load(
                  tileA,
                  {arith::AddIOp::create(
                       b, arith::MulIOp::create(b, ty, wb.index(rowsPerThread)),
                       wb.index(ri)),
                   kkIndex}));
            for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
              Value jj = arith::AddIOp::create(
                  b,
                  arith::MulIOp::create(b, tx, wb.index(kGemmColumnsPerThread)),
                  wb.index(ci));
              bGate.push_back(wb.load(tileB, {jj, kkIndex}));
              if (gated)
                bUp.push_back(wb.load(tileUp, {jj, kkIndex}));
            }
            // Multiply, then add: no contraction, so the sums round as the
            // CPU loops' do (k ascending).
            for (int64_t ri = 0; ri < rowsPerThread; ++ri)
              for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
                int64_t slot = ri * kGemmColumnsPerThread + ci;
                next[slot] = arith::AddFOp::create(
                    b, next[slot], arith::MulFOp::create(b, a[ri], bGate[ci]));
                if (gated)
                  next[accumulators + slot] = arith::AddFOp::create(
                      b, next[accumulators + slot],
                      arith::MulFOp::create(b, a[ri], bUp[ci]));
              }
          }
          gpu::BarrierOp::create(b);
          return next;
        },
        kGemmTileK);

    for (int64_t ri = 0; ri < rowsPerThread; ++ri) {
      Value row = arith::AddIOp::create(
          b, firstRow,
          arith::AddIOp::create(
              b, arith::MulIOp::create(b, ty, wb.index(rowsPerThread)),
              wb.index(ri)));
      auto [slot, routed] = slotOf(row);
      Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
      Value slotInToken = arith::RemUIOp::create(b, slot, wb.index(slots));
      wb.ifThen(routed, [&] {
        Value weight =
            weighted ? wb.load(routedWeights, {token, slotInToken}) : Value();
        for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
          Value column = arith::AddIOp::create(
              b, firstColumn,
              arith::AddIOp::create(
                  b,
                  arith::MulIOp::create(b, tx, wb.index(kGemmColumnsPerThread)),
                  wb.index(ci)));
          int64_t index = ri * kGemmColumnsPerThread + ci;
          wb.ifThen(
              wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
              [&] {
                Value value = sums[index];
                if (gated)
                  value = arith::MulFOp::create(
                      b, emitGatedActivation(b, b.getLoc(), activation, value),
                      sums[accumulators + index]);
                if (weight)
                  value = arith::MulFOp::create(b, value, weight);
                if (slotOutput)
                  wb.storeF32(value, output, {token, slotInToken, column});
                else
                  wb.storeF32(value, output, {row, column});
              });
        }
      });
    }
  });
  return success();
}
