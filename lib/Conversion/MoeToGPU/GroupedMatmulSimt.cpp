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

/// A shared-memory tiled SIMT kernel: one block per (block_m rows of one
/// expert) x 64 columns, fp32 accumulation over K in order, the epilogue on
/// the accumulators. The correct baseline the tensor-core path is measured
/// against; gathered and sorted rows, padding rows skipped, both output
/// orders. Thread (tx, ty) of the 16 x 16 computes rows ty * rowsPerThread +
/// ri and columns tx * 4 + ci of the block.
class SimtGroupedMatmulEmitter : GemmShape {
public:
  SimtGroupedMatmulEmitter(PlanBuilder &plan, OpBuilder &builder,
                           GroupedMatmulOp op);
  LogicalResult emit();

private:
  gpu::GPUFuncOp declareKernel();
  void setUpKernel(gpu::GPUFuncOp kernel);
  std::pair<Value, Value> slotOf(Value row);
  void stageRows(Value k0);
  void stageWeights(Value k0);
  SmallVector<Value> multiplyStage(ValueRange carried);
  Value withBias(Value sum, Value row);
  void storeRows(ArrayRef<Value> sums);

  PlanBuilder &plan;
  OpBuilder &builder;
  GroupedMatmulOp op;
  int64_t rowsPerThread, threads;
  /// Accumulators per thread (twice as many when gated: gate and up).
  int64_t accumulators;
  ImplicitLocOpBuilder b;
  LoopBuilder wb{b};
  KernelArgList args;
  unsigned inputArg, weightsArg, sortedIdsArg, expertIdsArg, numPaddedArg,
      outputArg;
  std::optional<unsigned> routedWeightsArg, biasArg;
  Value input, weights, sorted, experts, padded, routedWeights, bias, output;
  /// The shared tiles of a K step: A rows, B columns (gate, and up).
  Value tileA, tileB, tileUp;
  Value routedSlots, tid, tx, ty, firstColumn, firstRow, expert, active;
};

SimtGroupedMatmulEmitter::SimtGroupedMatmulEmitter(PlanBuilder &plan,
                                                   OpBuilder &builder,
                                                   GroupedMatmulOp op)
    : GemmShape(op), plan(plan), builder(builder), op(op),
      b(op.getLoc(), op.getContext()) {
  rowsPerThread = blockM / kGemmThreadsPerSide;
  threads = kGemmThreadsPerSide * kGemmThreadsPerSide;
  accumulators = rowsPerThread * kGemmColumnsPerThread;
}

/// The threads stage both operands (f32 and rows TMA cannot address have no
/// tensor-core kernel, so no TMA descriptors either).
gpu::GPUFuncOp SimtGroupedMatmulEmitter::declareKernel() {
  auto [capacity, rows, sortedIds, expertIds] = useGemmOperands(plan, op);
  inputArg = args.add(rows);
  weightsArg = args.add(plan.use(op.getWeights()));
  sortedIdsArg = args.add(sortedIds);
  expertIdsArg = args.add(expertIds);
  numPaddedArg = args.add(plan.use(op.getNumPadded()));
  routedWeightsArg =
      args.addIf(weighted, [&] { return plan.use(op.getRoutedWeights()); });
  biasArg = args.addIf(biased, [&] { return plan.use(op.getBias()); });
  outputArg = args.add(defineOutput(plan, op));
  Type f32 = builder.getF32Type();
  SmallVector<MemRefType> shared = {
      workgroupMemRef({blockM, kGemmTileK + 1}, f32),
      workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32)};
  if (gated)
    shared.push_back(workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32));
  return plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul", args.get(),
      {PlanBuilder::constant(llvm::divideCeil(columns, kGemmTileN)),
       PlanBuilder::ceilDiv(paddedRowsBound(plan, op), blockM),
       PlanBuilder::constant(1)},
      {threads, 1, 1}, shared);
}

void SimtGroupedMatmulEmitter::setUpKernel(gpu::GPUFuncOp kernel) {
  b.setInsertionPoint(builder.getInsertionBlock(), builder.getInsertionPoint());
  input = kernel.getArgument(inputArg);
  weights = kernel.getArgument(weightsArg);
  sorted = kernel.getArgument(sortedIdsArg);
  experts = kernel.getArgument(expertIdsArg);
  padded = kernel.getArgument(numPaddedArg);
  routedWeights = kernelArgument(kernel, routedWeightsArg);
  bias = kernelArgument(kernel, biasArg);
  output = kernel.getArgument(outputArg);
  auto attributions = kernel.getWorkgroupAttributions();
  tileA = attributions[0];
  tileB = attributions[1];
  tileUp = gated ? Value(attributions[2]) : Value();
  routedSlots = routedSlotCount(wb, kernel, op);

  tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  tx = arith::RemUIOp::create(b, tid, wb.index(kGemmThreadsPerSide));
  ty = arith::DivUIOp::create(b, tid, wb.index(kGemmThreadsPerSide));
  Value rowBlock = gpu::BlockIdOp::create(b, gpu::Dimension::y);
  firstColumn = arith::MulIOp::create(
      b, gpu::BlockIdOp::create(b, gpu::Dimension::x), wb.index(kGemmTileN));
  firstRow = arith::MulIOp::create(b, rowBlock, wb.index(blockM));
  expert = wb.toIndex(wb.load(experts, rowBlock));
  // Blocks past the padded rows, or of no expert, have nothing to do; the
  // condition is uniform over the block, so its barriers stay matched.
  active = arith::AndIOp::create(
      b,
      wb.cmpi(arith::CmpIPredicate::ult, firstRow,
              wb.toIndex(wb.load(padded, {}))),
      wb.inRange(expert, wb.index(0), wb.index(numExperts)));
}

/// The slot of sorted row `row`, and whether it is a routed slot.
std::pair<Value, Value> SimtGroupedMatmulEmitter::slotOf(Value row) {
  Value slot = wb.toIndex(wb.load(sorted, row));
  return {slot, wb.inRange(slot, wb.index(0), routedSlots)};
}

/// Stages the A rows of the K step at `k0` in shared memory as f32: gathered
/// or sorted, zero for padding rows and past K.
void SimtGroupedMatmulEmitter::stageRows(Value k0) {
  Value zero = wb.f32(0.0);
  for (int64_t base = 0; base < blockM * kGemmTileK; base += threads) {
    Value item = arith::AddIOp::create(b, tid, wb.index(base));
    Value i = arith::DivUIOp::create(b, item, wb.index(kGemmTileK));
    Value kk = arith::RemUIOp::create(b, item, wb.index(kGemmTileK));
    Value kIndex = arith::AddIOp::create(b, k0, kk);
    auto [slot, routed] = slotOf(arith::AddIOp::create(b, firstRow, i));
    Value source =
        tokenInput
            ? arith::DivUIOp::create(b, slot, wb.index(slots)).getResult()
            : arith::AddIOp::create(b, firstRow, i).getResult();
    Value valid = arith::AndIOp::create(
        b, routed, wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k)));
    Value value = wb.loadF32(input, {wb.select(valid, source, wb.index(0)),
                                     wb.select(valid, kIndex, wb.index(0))});
    wb.store(wb.select(valid, value, zero), tileA, {i, kk});
  }
}

/// Stages the B columns (weight rows of the expert; gate and up when gated)
/// of the K step at `k0` in shared memory as f32, zero past N or K.
void SimtGroupedMatmulEmitter::stageWeights(Value k0) {
  Value zero = wb.f32(0.0);
  for (int64_t base = 0; base < kGemmTileN * kGemmTileK; base += threads) {
    Value item = arith::AddIOp::create(b, tid, wb.index(base));
    Value jj = arith::DivUIOp::create(b, item, wb.index(kGemmTileK));
    Value kk = arith::RemUIOp::create(b, item, wb.index(kGemmTileK));
    Value column = arith::AddIOp::create(b, firstColumn, jj);
    Value kIndex = arith::AddIOp::create(b, k0, kk);
    Value valid = arith::AndIOp::create(
        b, wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
        wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k)));
    Value safeColumn = wb.select(valid, column, wb.index(0));
    Value safeK = wb.select(valid, kIndex, wb.index(0));
    // Weight (expert, column + tile * columns, k) of the step.
    auto weight = [&](int64_t tile) {
      return wb.loadF32(weights, {expert,
                                  arith::AddIOp::create(
                                      b, safeColumn, wb.index(tile * columns)),
                                  safeK});
    };
    wb.store(wb.select(valid, weight(0), zero), tileB, {jj, kk});
    if (gated)
      wb.store(wb.select(valid, weight(1), zero), tileUp, {jj, kk});
  }
}

/// The thread's accumulators after the staged K step.
SmallVector<Value> SimtGroupedMatmulEmitter::multiplyStage(ValueRange carried) {
  SmallVector<Value> next(carried.begin(), carried.end());
  for (int64_t kk = 0; kk < kGemmTileK; ++kk) {
    Value kkIndex = wb.index(kk);
    SmallVector<Value> a, bGate, bUp;
    for (int64_t ri = 0; ri < rowsPerThread; ++ri)
      a.push_back(wb.load(
          tileA, {arith::AddIOp::create(
                      b, arith::MulIOp::create(b, ty, wb.index(rowsPerThread)),
                      wb.index(ri)),
                  kkIndex}));
    for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
      Value jj = arith::AddIOp::create(
          b, arith::MulIOp::create(b, tx, wb.index(kGemmColumnsPerThread)),
          wb.index(ci));
      bGate.push_back(wb.load(tileB, {jj, kkIndex}));
      if (gated)
        bUp.push_back(wb.load(tileUp, {jj, kkIndex}));
    }
    // Multiply, then add: no contraction, so the sums round as the CPU
    // loops' do (k ascending).
    for (int64_t ri = 0; ri < rowsPerThread; ++ri)
      for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
        int64_t slot = ri * kGemmColumnsPerThread + ci;
        next[slot] = arith::AddFOp::create(
            b, next[slot], arith::MulFOp::create(b, a[ri], bGate[ci]));
        if (gated)
          next[accumulators + slot] =
              arith::AddFOp::create(b, next[accumulators + slot],
                                    arith::MulFOp::create(b, a[ri], bUp[ci]));
      }
  }
  return next;
}

/// `sum` plus the expert's bias at weight row `row` when the op has one.
Value SimtGroupedMatmulEmitter::withBias(Value sum, Value row) {
  if (!bias)
    return sum;
  return arith::AddFOp::create(b, sum, wb.loadF32(bias, {expert, row}));
}

/// The epilogue on the accumulators of the thread's routed rows: bias, gated
/// activation, routed weight, and the store in the op's row order.
void SimtGroupedMatmulEmitter::storeRows(ArrayRef<Value> sums) {
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
            wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)), [&] {
              Value value = withBias(sums[index], column);
              if (gated)
                value =
                    emitGatedPair(b, b.getLoc(), activation, swiglu, value,
                                  withBias(sums[accumulators + index],
                                           arith::AddIOp::create(
                                               b, column, wb.index(columns))),
                                  kEpilogueFastMath);
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
}

LogicalResult SimtGroupedMatmulEmitter::emit() {
  if (blockM % kGemmThreadsPerSide != 0 || blockM > 128)
    return op.emitOpError() << "has no GPU lowering for block_m " << blockM
                            << " (a multiple of 16 up to 128)";
  OpBuilder::InsertionGuard guard(builder);
  setUpKernel(declareKernel());
  wb.ifThen(active, [&] {
    SmallVector<Value> inits(gated ? 2 * accumulators : accumulators,
                             wb.f32(0.0));
    SmallVector<Value> sums = wb.loop(
        wb.index(0), wb.index(k), inits,
        [&](Value k0, ValueRange carried) -> SmallVector<Value> {
          stageRows(k0);
          stageWeights(k0);
          gpu::BarrierOp::create(b);
          SmallVector<Value> next = multiplyStage(carried);
          gpu::BarrierOp::create(b);
          return next;
        },
        kGemmTileK);
    storeRows(sums);
  });
  return success();
}

} // namespace

LogicalResult mlir::moe::detail::emitSimtGroupedMatmul(PlanBuilder &plan,
                                                       OpBuilder &builder,
                                                       GroupedMatmulOp op) {
  return SimtGroupedMatmulEmitter(plan, builder, op).emit();
}
