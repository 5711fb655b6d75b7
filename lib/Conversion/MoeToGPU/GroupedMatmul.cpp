//===- GroupedMatmul.cpp - moe.grouped_matmul to GPU kernels --------------===//

#include "PlanBuilder.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

/// The routing capacity C = T*S + E*(block_m - 1) of the op's sorted rows.
SizeExpr routedCapacity(PlanBuilder &plan, GroupedMatmulOp op) {
  return plan.affine(op.getNumSlots(),
                     op.getNumStoredExperts() * (op.getBlockM() - 1));
}

/// The plan buffers of a grouped matmul's input rows and routing operands,
/// given the dims the op derives for them from the capacity C: sorted ids
/// [C], block experts [ceil(C / block_m)], sorted input rows [C, K].
struct GemmOperands {
  SizeExpr capacity;
  unsigned rows, sortedIds, expertIds;
};

GemmOperands useGemmOperands(PlanBuilder &plan, GroupedMatmulOp op) {
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

/// Registers the op's output buffer: [T, S, N'] in slot order, [C, N'] in
/// sorted order.
unsigned defineOutput(PlanBuilder &plan, GroupedMatmulOp op) {
  int64_t columns = op.getOutputColumns(), slots = op.getNumSlots();
  SmallVector<SizeExpr> dims =
      op.getOutputOrder() == RowOrder::slot
          ? SmallVector<SizeExpr>{plan.tokens(), PlanBuilder::constant(slots),
                                  PlanBuilder::constant(columns)}
          : SmallVector<SizeExpr>{routedCapacity(plan, op),
                                  PlanBuilder::constant(columns)};
  return plan.define(op.getOutput(), "gemm_output", dims);
}

constexpr int64_t kGemmThreadsPerSide = 16;
constexpr int64_t kGemmTileN = 64, kGemmTileK = 16;
constexpr int64_t kGemmColumnsPerThread = kGemmTileN / kGemmThreadsPerSide;

/// A shared-memory tiled SIMT kernel: one block per (block_m rows of one
/// expert) x 64 columns, fp32 accumulation over K in order, the epilogue on
/// the accumulators. The correct baseline the tensor-core path is measured
/// against; gathered and sorted rows, padding rows skipped, both output
/// orders.
LogicalResult emitSimtGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
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
  SmallVector<KernelArg> args = {rows, plan.use(op.getWeights()), sortedIds,
                                 expertIds, plan.use(op.getNumPadded())};
  if (weighted)
    args.push_back(plan.use(op.getRoutedWeights()));
  args.push_back(defineOutput(plan, op));
  Type f32 = builder.getF32Type();
  SmallVector<MemRefType> shared = {
      workgroupMemRef({blockM, kGemmTileK + 1}, f32),
      workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32)};
  if (gated)
    shared.push_back(workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul", args,
      {PlanBuilder::constant(llvm::divideCeil(columns, kGemmTileN)),
       PlanBuilder::ceilDiv(capacity, blockM), PlanBuilder::constant(1)},
      {threads, 1, 1}, shared);

  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder wb{b};
  Value input = kernel.getArgument(0), weights = kernel.getArgument(1);
  Value sorted = kernel.getArgument(2), experts = kernel.getArgument(3);
  Value padded = kernel.getArgument(4);
  Value routedWeights = weighted ? Value(kernel.getArgument(5)) : Value();
  Value output = kernel.getArgument(weighted ? 6 : 5);
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

//===----------------------------------------------------------------------===//
// The tensor-core (wgmma) kernel
//===----------------------------------------------------------------------===//

constexpr int64_t kWarpgroupThreads = 128;
/// K elements of one wgmma instruction (its M is kWgmmaRows).
constexpr int64_t kWgmmaK = 16;
/// The swizzle span of the tiles TMA and the row gathers write: a K tile is
/// one 128-byte row per matrix row, and 8 rows form a 1024-byte atom.
constexpr int64_t kSwizzleBytes = 128, kSwizzleAtomBytes = 1024;
constexpr int64_t kCopyBytes = 16;
/// Row blocks per group of the block order (see the kernel).
constexpr int64_t kRasterRowBlocks = 16;

/// The wgmma matrix descriptor of a K-major tile at shared address `address`
/// (i64, 1024-aligned) in the 128-byte swizzle layout: start address >> 4,
/// 8-row groups kSwizzleAtomBytes apart, layout type 1 (128-byte swizzle);
/// the leading offset is unused by swizzled K-major tiles.
Value wgmmaDescriptor(ImplicitLocOpBuilder &b, Value address) {
  auto i64 = [&](int64_t value) {
    return arith::ConstantOp::create(b, b.getI64IntegerAttr(value));
  };
  Value start = arith::ShRUIOp::create(
      b, arith::AndIOp::create(b, address, i64(0x3FFFF)), i64(4));
  int64_t fields = (int64_t(1) << 16) | ((kSwizzleAtomBytes >> 4) << 32) |
                   (int64_t(1) << 62);
  return arith::OrIOp::create(b, start, i64(fields));
}

/// Whether the wgmma kernel can run `op` under `config`; else says why.
LogicalResult checkWgmmaConfig(GroupedMatmulOp op, GemmConfigAttr config) {
  int64_t elementBytes = op.getWeightsType().getElementTypeBitWidth() / 8;
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
  if (config.getClusterM() != 1 || config.getClusterN() != 1)
    return fail("no thread-block clusters are built yet");
  int64_t numSteps =
      llvm::divideCeil(op.getReductionSize(), config.getBlockK());
  int64_t splits = config.getSplitK();
  if (!everySplitHasKTile(numSteps, splits))
    return fail("split_k must leave every split a K tile (" + Twine(numSteps) +
                " K tiles)");
  if (config.getTmaA() != (op.getInputOrder() == RowOrder::sorted))
    return fail("tma_a must be set exactly for sorted input rows");
  if (!config.getTmaB())
    return fail("tma_b must be set (weights load only by TMA)");
  // The descriptors moe-tma made, with the boxes the kernel's tiles have.
  auto checkMap = [&](Value map, StringRef name,
                      ArrayRef<int64_t> box) -> LogicalResult {
    if (!map)
      return op.emitOpError() << "has no " << name
                              << " for its config's TMA loads (run moe-tma)";
    auto expected = TensorMapType::get(op.getContext(),
                                       op.getWeightsType().getElementType(),
                                       box, kSwizzleBytes);
    if (map.getType() != expected)
      return op.emitOpError() << "expects its " << name << " to be " << expected
                              << " for " << config << ", got " << map.getType();
    return success();
  };
  if (failed(checkMap(op.getWeightsMap(), "weights_map",
                      getWeightsTmaBox(op, config))))
    return failure();
  if (config.getTmaA())
    return checkMap(op.getInputMap(), "input_map", getInputTmaBox(config));
  return success();
}

/// Blocks of the wgmma kernel a Hopper multiprocessor holds at once: its
/// 228 KiB of shared memory (1 KiB per block reserved), 64 Ki registers
/// (a thread holds block_n / 2 accumulators and about 40 more) and 2048
/// threads.
int64_t residentBlocks(int64_t threads, int64_t blockN, int64_t sharedBytes) {
  constexpr int64_t kSharedBytesPerSM = 228 * 1024, kReservedBytes = 1024;
  constexpr int64_t kRegistersPerSM = 64 * 1024, kThreadsPerSM = 2048;
  int64_t registersPerThread = std::min<int64_t>(255, blockN / 2 + 40);
  return std::max<int64_t>(
      1, std::min({kSharedBytesPerSM / (sharedBytes + kReservedBytes),
                   kRegistersPerSM / (threads * registersPerThread),
                   kThreadsPerSM / threads}));
}

/// The workspaces of a split-K grouped matmul: fp32 partial sums [splits,
/// T*S, N] per routed slot, and each slot's sorted row [T*S].
struct ReductionBuffers {
  unsigned partials, slotRows;
};

/// Split-K epilogue of the wgmma kernel: stores every accumulator register of
/// the thread's routed rows as split `split`'s partial sum of its slot and
/// weight row (gate rows, then up rows, as the weights hold them); the first
/// split also records each slot's sorted row.
void storePartials(LoopBuilder &wb, Value accumulators, Value laneRow,
                   Value laneColumn, Value firstRow, Value firstColumn,
                   Value split,
                   function_ref<std::pair<Value, Value>(Value)> slotOf,
                   Value partials, Value slotRows, GroupedMatmulOp op,
                   GemmConfigAttr config) {
  ImplicitLocOpBuilder &b = wb.b;
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
          Value value = LLVM::ExtractValueOp::create(b, accumulators,
                                                     block * 4 + half * 2 + i);
          wb.ifThen(
              wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
              [&] {
                wb.store(
                    value, partials,
                    {split, slot,
                     arith::AddIOp::create(b, column, wb.index(halfOffset))});
              });
        }
      }
    });
  }
}

constexpr int64_t kReduceThreads = 256;

/// The split-K reduction: one thread per (routed slot, output column) adds
/// the splits' partial sums in split order, then runs the op's epilogue
/// (gated activation, routed weight) and stores in the op's row order.
void emitSplitReduction(PlanBuilder &plan, OpBuilder &builder,
                        GroupedMatmulOp op, int64_t splits,
                        const ReductionBuffers &buffers) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t columns = op.getOutputColumns(), slots = op.getNumSlots();
  bool gated = op.isGated(),
       weighted = static_cast<bool>(op.getRoutedWeights());
  bool slotOutput = op.getOutputOrder() == RowOrder::slot;
  SmallVector<KernelArg> args = {buffers.partials, buffers.slotRows};
  if (weighted)
    args.push_back(plan.use(op.getRoutedWeights()));
  args.push_back(defineOutput(plan, op));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul_reduce", args,
      {PlanBuilder::ceilDiv(plan.affine(slots * columns, 0), kReduceThreads),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kReduceThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder wb{b};
  Value partials = kernel.getArgument(0), slotRows = kernel.getArgument(1);
  Value routedWeights = weighted ? Value(kernel.getArgument(2)) : Value();
  Value output = kernel.getArgument(weighted ? 3 : 2);
  Value routedSlots =
      arith::MulIOp::create(b, wb.toIndex(tokenCount(kernel)), wb.index(slots));
  Value item = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kReduceThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value slot = arith::DivUIOp::create(b, item, wb.index(columns));
  Value column = arith::RemUIOp::create(b, item, wb.index(columns));
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, slot, routedSlots), [&] {
    auto sum = [&](Value weightRow) {
      Value total = wb.f32(0.0);
      for (int64_t split = 0; split < splits; ++split)
        total = arith::AddFOp::create(
            b, total, wb.load(partials, {wb.index(split), slot, weightRow}));
      return total;
    };
    Value value = sum(column);
    if (gated)
      value = arith::MulFOp::create(
          b, emitGatedActivation(b, b.getLoc(), op.getActivation(), value),
          sum(arith::AddIOp::create(b, column, wb.index(columns))));
    Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
    Value slotInToken = arith::RemUIOp::create(b, slot, wb.index(slots));
    if (weighted)
      value = arith::MulFOp::create(
          b, value, wb.load(routedWeights, {token, slotInToken}));
    if (slotOutput)
      wb.storeF32(value, output, {token, slotInToken, column});
    else
      wb.storeF32(value, output,
                  {wb.toIndex(wb.load(slotRows, {slot})), column});
  });
}

/// One warpgroup per 64 rows of one expert x block_n accumulator columns
/// (one or two per block, plus a producer warpgroup when warp-specialized):
/// a ring of `num_stages` shared-memory stages filled by TMA through the
/// op's tensor maps (weights: one 3-D map over [E, N, K]; sorted rows: a 2-D
/// map over [C, K]) or cp.async row gathers (token rows), each stage's TMA
/// bytes counted in by its mbarrier; wgmma m64 x block_n x k16 with both
/// operands K-major in 128-byte swizzled tiles, one group in flight while
/// the next stage is refilled; the epilogue (gated activation, routed
/// weight, sorted or scattered store) on the accumulator registers, or
/// per-split partial sums and a reduction kernel. One block per tile, or,
/// persistent, blocks walking the tiles with the ring running on.
LogicalResult emitWgmmaGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
                                     GroupedMatmulOp op,
                                     GemmConfigAttr config) {
  if (failed(checkWgmmaConfig(op, config)))
    return failure();
  OpBuilder::InsertionGuard guard(builder);
  RankedTensorType weightsType = op.getWeightsType();
  Type elementType = weightsType.getElementType();
  int64_t elementBytes = weightsType.getElementTypeBitWidth() / 8;
  int64_t numExperts = op.getNumStoredExperts(), k = op.getReductionSize();
  int64_t slots = op.getNumSlots(), blockM = op.getBlockM();
  int64_t blockN = config.getBlockN(), blockK = config.getBlockK();
  int64_t stages = config.getNumStages();
  Activation activation = op.getActivation();
  bool gated = op.isGated();
  int64_t columns = op.getOutputColumns();
  bool tokenInput = op.getInputOrder() == RowOrder::token;
  bool slotOutput = op.getOutputOrder() == RowOrder::slot;
  bool weighted = static_cast<bool>(op.getRoutedWeights());
  // Each warpgroup takes one wgmma's rows of the block (warpgroup w rows
  // [64 w, 64 w + 64)), all against the block's one weight tile; smaller
  // routing blocks leave the rest of the rows unused (masked). The row tile
  // and each weight box are the boxes of moe-tma's maps.
  int64_t warpgroups = config.getNumWarpgroups();
  int64_t tileRows = getInputTmaBox(config).front();
  // Warp-specialized, one more warpgroup only loads; otherwise every thread
  // loads (gathers rows) and multiplies.
  bool warpSpecialized = config.getWarpSpecialized();
  int64_t threads = (warpgroups + warpSpecialized) * kWarpgroupThreads;
  int64_t loaders = warpSpecialized ? kWarpgroupThreads : threads;
  int64_t blockRows = std::min(blockM, tileRows);
  // Gated: the gate and up halves of the output columns side by side, so
  // act(gate) * up pairs registers of one thread.
  int64_t outputColumnsPerBlock = gated ? blockN / 2 : blockN;
  int64_t boxRows = getWeightsTmaBox(op, config)[1];
  int64_t numBoxes = 1 + gated;
  int64_t rowTileBytes = tileRows * blockK * elementBytes;
  int64_t weightTileBytes = blockN * blockK * elementBytes;
  int64_t stageTmaBytes = weightTileBytes + (tokenInput ? 0 : rowTileBytes);
  int64_t numColumnTiles = llvm::divideCeil(columns, outputColumnsPerBlock);

  auto [capacity, rows, sortedIds, expertIds] = useGemmOperands(plan, op);
  KernelArg weightsArg =
      KernelArg::tensorMap(plan.tensorMapOf(op.getWeightsMap()));
  KernelArg rowsArg =
      tokenInput ? KernelArg(rows)
                 : KernelArg::tensorMap(plan.tensorMapOf(op.getInputMap()));
  SmallVector<KernelArg> args = {rowsArg, weightsArg, sortedIds, expertIds,
                                 plan.use(op.getNumPadded())};
  // Split K: each split stores its fp32 partial sums per routed slot (and
  // the first split each slot's row); a second kernel adds the splits in
  // order and runs the epilogue. Every slot is routed once, so the
  // workspaces are overwritten whole and need no zeroing.
  int64_t splits = config.getSplitK();
  std::optional<ReductionBuffers> reduction;
  if (splits > 1) {
    reduction = ReductionBuffers{
        plan.scratch("gemm_partials", builder.getF32Type(),
                     {PlanBuilder::constant(splits), plan.affine(slots, 0),
                      PlanBuilder::constant(weightsType.getDimSize(1))}),
        plan.scratch("gemm_slot_rows", builder.getI32Type(),
                     {plan.affine(slots, 0)})};
    args.append({reduction->partials, reduction->slotRows});
  } else {
    if (weighted)
      args.push_back(plan.use(op.getRoutedWeights()));
    args.push_back(defineOutput(plan, op));
  }
  int64_t sharedBytes = stages * (rowTileBytes + weightTileBytes);
  // A block per tile of the capacity's row blocks; persistent, as many as
  // the multiprocessors hold at once.
  SizeExpr gridSize =
      PlanBuilder::ceilDiv(capacity, blockRows).times(numColumnTiles * splits);
  if (config.getPersistent())
    gridSize = PlanBuilder::min(
        gridSize, plan.numSMs * residentBlocks(threads, blockN, sharedBytes));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul_wgmma", args,
      {gridSize, PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {threads, 1, 1}, /*workgroup=*/{}, sharedBytes);

  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder wb{b};
  MLIRContext *ctx = b.getContext();
  Value input = kernel.getArgument(0), weights = kernel.getArgument(1);
  Value sorted = kernel.getArgument(2), experts = kernel.getArgument(3);
  Value padded = kernel.getArgument(4);
  Value routedWeights, output, partials, slotRows;
  if (reduction) {
    partials = kernel.getArgument(5);
    slotRows = kernel.getArgument(6);
  } else {
    routedWeights = weighted ? Value(kernel.getArgument(5)) : Value();
    output = kernel.getArgument(weighted ? 6 : 5);
  }
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value routedSlots = arith::MulIOp::create(b, numTokens, wb.index(slots));

  // The ring: stage s's row tile at s * rowTileBytes, its weight tile (the
  // boxes one after another) after all row tiles; every tile 1024-aligned.
  Value sharedBase = dynamicSharedMemory(b, plan.kernels);
  auto sharedView = [&](ArrayRef<int64_t> shape, Value byteOffset) -> Value {
    auto type = MemRefType::get(shape, elementType, MemRefLayoutAttrInterface(),
                                b.getI64IntegerAttr(kSharedAddressSpace));
    return memref::ViewOp::create(b, type, sharedBase, byteOffset,
                                  ValueRange());
  };
  auto rowTileOffset = [&](Value stage) -> Value {
    return arith::MulIOp::create(b, stage, wb.index(rowTileBytes));
  };
  auto weightBoxOffset = [&](Value stage, int64_t box) -> Value {
    return arith::AddIOp::create(
        b, arith::MulIOp::create(b, stage, wb.index(weightTileBytes)),
        wb.index(stages * rowTileBytes +
                 box * boxRows * blockK * elementBytes));
  };
  // The nvgpu view of a map kernel argument: TMA copies of its boxes.
  auto descriptor = [&](Value map, Value argument) -> Value {
    auto type = nvgpu::TensorMapDescriptorType::get(
        ctx,
        MemRefType::get(cast<TensorMapType>(map.getType()).getBox(),
                        elementType, MemRefLayoutAttrInterface(),
                        b.getI64IntegerAttr(kSharedAddressSpace)),
        nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
        nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
        nvgpu::TensorMapOOBKind::OOB_ZERO,
        nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
    return UnrealizedConversionCastOp::create(b, type, argument).getResult(0);
  };
  Value weightMap = descriptor(op.getWeightsMap(), weights);
  Value rowMap = tokenInput ? Value() : descriptor(op.getInputMap(), input);

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(b, tid, wb.index(32));
  Value lane = arith::RemUIOp::create(b, tid, wb.index(32));
  // Warp-specialized, the last warpgroup loads; `loader` numbers the
  // loading threads (the leader issues TMA and initialises the barriers).
  Value loader = warpSpecialized
                     ? arith::SubIOp::create(
                           b, tid, wb.index(warpgroups * kWarpgroupThreads))
                     : tid;
  Value leader = wb.cmpi(arith::CmpIPredicate::eq, loader, wb.index(0));
  auto barrierGroup = nvgpu::MBarrierGroupType::get(
      ctx, b.getI64IntegerAttr(kSharedAddressSpace), stages);
  // `full[s]`: stage s holds its K tile. Warp-specialized, `empty[s]`: the
  // consumers are done with stage s, and the gathering producer threads
  // arrive on `full` themselves once their rows are in.
  Value full = nvgpu::MBarrierCreateOp::create(b, barrierGroup);
  Value empty = warpSpecialized
                    ? Value(nvgpu::MBarrierCreateOp::create(b, barrierGroup))
                    : Value();
  int64_t fullArrivals =
      warpSpecialized && tokenInput ? kWarpgroupThreads + 1 : 1;
  // Initialises the barriers before any thread uses them: once per block,
  // by the blocks that have a tile.
  auto initRing = [&] {
    wb.ifThen(leader, [&] {
      nvgpu::TmaPrefetchOp::create(b, weightMap, Value());
      if (rowMap)
        nvgpu::TmaPrefetchOp::create(b, rowMap, Value());
      for (int64_t stage = 0; stage < stages; ++stage) {
        nvgpu::MBarrierInitOp::create(b, full, wb.index(fullArrivals),
                                      wb.index(stage), Value());
        if (empty)
          nvgpu::MBarrierInitOp::create(
              b, empty, wb.index(warpgroups * kWarpgroupThreads),
              wb.index(stage), Value());
      }
    });
    gpu::BarrierOp::create(b);
  };

  // The block's work on tile `tileIndex` of the `numRowBlocks` x N tiles x
  // splits; `ringBase` counts the K tiles the ring took before it (null:
  // none, the tile is the block's only one). Returns the count after it.
  auto runTile = [&](Value tileIndex, Value numRowBlocks,
                     Value ringBase) -> Value {
    // Blocks run in groups of kRasterRowBlocks row blocks, row block fastest
    // within a group, so the blocks resident at once share each weight tile
    // (an expert's rows are consecutive) and a group's rows stay in L2.
    // The splits of a tile are neighbours: they share its rows in L2.
    Value linear = arith::DivUIOp::create(b, tileIndex, wb.index(splits));
    Value split = arith::RemUIOp::create(b, tileIndex, wb.index(splits));
    Value groupBlocks = wb.index(kRasterRowBlocks * numColumnTiles);
    Value group = arith::DivUIOp::create(b, linear, groupBlocks);
    Value inGroup = arith::RemUIOp::create(b, linear, groupBlocks);
    Value groupFirstRowBlock =
        arith::MulIOp::create(b, group, wb.index(kRasterRowBlocks));
    Value groupRowBlocks = arith::MinUIOp::create(
        b, wb.index(kRasterRowBlocks),
        arith::SubIOp::create(b, numRowBlocks, groupFirstRowBlock));
    Value rowBlock = arith::AddIOp::create(
        b, groupFirstRowBlock,
        arith::RemUIOp::create(b, inGroup, groupRowBlocks));
    Value columnTile = arith::DivUIOp::create(b, inGroup, groupRowBlocks);
    Value firstRow = arith::MulIOp::create(b, rowBlock, wb.index(blockRows));
    Value firstColumn =
        arith::MulIOp::create(b, columnTile, wb.index(outputColumnsPerBlock));
    Value expert = wb.toIndex(wb.load(
        experts, {arith::DivUIOp::create(b, firstRow, wb.index(blockM))}));
    // Blocks past the padded rows, or of no expert, have nothing to do; the
    // condition is uniform over the block, so its barriers stay matched.
    Value active = arith::AndIOp::create(
        b,
        wb.cmpi(arith::CmpIPredicate::ult, firstRow,
                wb.toIndex(wb.load(padded, {}))),
        wb.inRange(expert, wb.index(0), wb.index(numExperts)));
    // The slot of the block's row `rowInBlock`, and whether it is a routed
    // slot of this block.
    auto slotOf = [&](Value rowInBlock) -> std::pair<Value, Value> {
      Value inBlock =
          wb.cmpi(arith::CmpIPredicate::ult, rowInBlock, wb.index(blockRows));
      Value row = arith::AddIOp::create(
          b, firstRow, wb.select(inBlock, rowInBlock, wb.index(0)));
      Value slot = wb.toIndex(wb.load(sorted, row));
      return {slot,
              arith::AndIOp::create(
                  b, inBlock, wb.inRange(slot, wb.index(0), routedSlots))};
    };

    // This split's K tiles: [firstStep, firstStep + numSteps).
    int64_t stepsPerSplit =
        llvm::divideCeil(llvm::divideCeil(k, blockK), splits);
    Value firstStep = arith::MulIOp::create(b, split, wb.index(stepsPerSplit));
    Value numSteps = arith::MinUIOp::create(
        b, wb.index(stepsPerSplit),
        arith::SubIOp::create(b, wb.index(llvm::divideCeil(k, blockK)),
                              firstStep));
    wb.ifThen(active, [&] {
      if (!ringBase)
        initRing();
      // Gathered rows: thread t of the loading threads copies 16-byte chunk
      // t % 8 of the rows t / 8 + (loaders / 8) j; the sources stay the same
      // for every K tile.
      int64_t chunksPerRow = kSwizzleBytes / kCopyBytes;
      int64_t rowsPerPass = loaders / chunksPerRow;
      Value chunk = arith::RemUIOp::create(b, loader, wb.index(chunksPerRow));
      Value chunkRow =
          arith::DivUIOp::create(b, loader, wb.index(chunksPerRow));
      // Chunk c of row r lands at chunk c ^ (r % 8) of its 128-byte row, as
      // TMA's 128-byte swizzle would put it; r % 8 is the same for all of a
      // thread's rows.
      Value swizzledColumn = arith::MulIOp::create(
          b,
          arith::XOrIOp::create(
              b, chunk,
              arith::RemUIOp::create(b, chunkRow, wb.index(chunksPerRow))),
          wb.index(kCopyBytes / elementBytes));
      auto gatherSources = [&] {
        SmallVector<std::pair<Value, Value>> sources;
        for (int64_t pass = 0; pass < tileRows / rowsPerPass; ++pass) {
          auto [slot, routed] = slotOf(
              arith::AddIOp::create(b, chunkRow, wb.index(pass * rowsPerPass)));
          Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
          sources.push_back({wb.select(routed, token, wb.index(0)), routed});
        }
        return sources;
      };

      // The ring's count of the split's K tile `step`: its stage and barrier
      // phases run on across the block's tiles.
      auto ringStep = [&](Value step) -> Value {
        return ringBase ? arith::AddIOp::create(b, ringBase, step).getResult()
                        : step;
      };
      auto stageOf = [&](Value step) {
        return arith::RemUIOp::create(b, ringStep(step), wb.index(stages));
      };
      // Parity of the phase of its stage's barrier that K tile `step` is at
      // (`round` rounds of the ring later).
      auto parityOf = [&](Value step, int64_t round) {
        Value phase = arith::AddIOp::create(
            b, arith::DivUIOp::create(b, ringStep(step), wb.index(stages)),
            wb.index(round));
        return arith::IndexCastOp::create(
            b, b.getI1Type(), arith::RemUIOp::create(b, phase, wb.index(2)));
      };
      // Loads the split's K tile `step` into its stage: the weight boxes and
      // sorted rows by TMA from the leader, counted in on `full`; token rows
      // by this thread's cp.async gathers (`sources`), committed as one group.
      auto loadTile = [&](Value step,
                          ArrayRef<std::pair<Value, Value>> sources) {
        Value stage = stageOf(step);
        Value k0 = arith::MulIOp::create(
            b, arith::AddIOp::create(b, firstStep, step), wb.index(blockK));
        wb.ifThen(leader, [&] {
          nvgpu::MBarrierArriveExpectTxOp::create(
              b, full, wb.index(stageTmaBytes), stage, Value());
          for (int64_t box = 0; box < numBoxes; ++box) {
            Value column = arith::AddIOp::create(
                b,
                gated ? firstColumn
                      : arith::MulIOp::create(b, columnTile, wb.index(blockN)),
                wb.index(box * columns));
            nvgpu::TmaAsyncLoadOp::create(
                b,
                sharedView({1, boxRows, blockK}, weightBoxOffset(stage, box)),
                full, weightMap, ValueRange{k0, column, expert}, stage, Value(),
                Value());
          }
          if (rowMap)
            nvgpu::TmaAsyncLoadOp::create(
                b, sharedView({tileRows, blockK}, rowTileOffset(stage)), full,
                rowMap, ValueRange{k0, firstRow}, stage, Value(), Value());
        });
        if (!tokenInput)
          return;
        Value tile = sharedView({tileRows, blockK}, rowTileOffset(stage));
        Value kIndex = arith::AddIOp::create(
            b, k0,
            arith::MulIOp::create(b, chunk,
                                  wb.index(kCopyBytes / elementBytes)));
        Value kValid = wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k));
        for (auto [pass, source] : llvm::enumerate(sources)) {
          Value valid = arith::AndIOp::create(b, source.second, kValid);
          Value tileRow =
              arith::AddIOp::create(b, chunkRow, wb.index(pass * rowsPerPass));
          // Invalid chunks copy no bytes and zero-fill their 16 bytes.
          nvgpu::DeviceAsyncCopyOp::create(
              b, nvgpu::DeviceAsyncTokenType::get(ctx), tile,
              ValueRange{tileRow, swizzledColumn}, input,
              ValueRange{source.first, wb.select(kValid, kIndex, wb.index(0))},
              b.getIndexAttr(kCopyBytes / elementBytes),
              wb.select(valid, wb.index(kCopyBytes / elementBytes),
                        wb.index(0)),
              b.getUnitAttr());
        }
      };
      // This thread's gathered chunks of all but its last `pendingGroups`
      // K tiles are in shared memory, ordered before the tensor cores' reads.
      auto awaitGathers = [&](int64_t pendingGroups) {
        NVVM::CpAsyncWaitGroupOp::create(b, pendingGroups);
        NVVM::FenceProxyOp::create(
            b, NVVM::ProxyKindAttr::get(ctx, NVVM::ProxyKind::async_shared),
            NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
      };

      Type f32 = b.getF32Type();
      int64_t registers = blockN / 2;
      auto accumulatorType = LLVM::LLVMStructType::getLiteral(
          ctx, SmallVector<Type>(registers, f32));
      auto i64 = [&](Value indexValue) -> Value {
        return arith::IndexCastOp::create(b, b.getI64Type(), indexValue);
      };
      Value sharedAddress = arith::IndexCastOp::create(
          b, b.getI64Type(),
          memref::ExtractAlignedPointerAsIndexOp::create(b, sharedBase));
      Value tileDescriptors = wgmmaDescriptor(b, sharedAddress);
      Value weightDescriptors = arith::AddIOp::create(
          b, tileDescriptors,
          arith::ConstantOp::create(
              b, b.getI64IntegerAttr((stages * rowTileBytes) >> 4)));
      auto shape = NVVM::MMAShapeAttr::get(ctx, kWgmmaRows, blockN, kWgmmaK);
      NVVM::WGMMATypes wgmmaType =
          elementType.isBF16() ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
      // The wgmmas of K tile `step` (in its stage) for the rows of consumer
      // warpgroup `consumer` ([64 c, 64 c + 64) of the row tile), chained on
      // `sum` and committed as one group.
      auto multiplyTile = [&](Value step, Value consumer, Value sum,
                              bool overwrite) -> Value {
        Value stage = stageOf(step);
        Value rowDescriptor = arith::AddIOp::create(
            b, tileDescriptors,
            i64(arith::AddIOp::create(
                b, arith::MulIOp::create(b, stage, wb.index(rowTileBytes >> 4)),
                arith::MulIOp::create(
                    b, consumer,
                    wb.index(kWgmmaRows * blockK * elementBytes >> 4)))));
        Value weightDescriptor = arith::AddIOp::create(
            b, weightDescriptors,
            i64(arith::MulIOp::create(b, stage,
                                      wb.index(weightTileBytes >> 4))));
        // Accumulators are touched only by the wgmmas from here to the wait,
        // so they chain without a register round trip.
        NVVM::WgmmaFenceAlignedOp::create(b);
        for (int64_t kk = 0; kk < blockK / kWgmmaK; ++kk) {
          // A k16 step advances 32 bytes inside the swizzle atom.
          Value advance = arith::ConstantOp::create(
              b, b.getI64IntegerAttr(kk * kWgmmaK * elementBytes >> 4));
          sum = NVVM::WgmmaMmaAsyncOp::create(
              b, accumulatorType, sum,
              arith::AddIOp::create(b, rowDescriptor, advance),
              arith::AddIOp::create(b, weightDescriptor, advance), shape,
              wgmmaType, wgmmaType, NVVM::WGMMATypes::f32,
              overwrite && kk == 0 ? NVVM::WGMMAScaleOut::zero
                                   : NVVM::WGMMAScaleOut::one,
              NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one,
              NVVM::MMALayout::row, NVVM::MMALayout::col,
              NVVM::MMAIntOverflowAttr());
        }
        NVVM::WgmmaGroupSyncAlignedOp::create(b);
        return sum;
      };
      // The split's K tiles through `tile` (K tile, accumulators so far,
      // whether they are still undefined): the first outside the loop, its
      // first wgmma overwriting an undefined struct (scale-d 0), so that no
      // move ever initialises the accumulators (ptxas would fence the wgmmas
      // for it, C7519).
      auto accumulate =
          [&](function_ref<Value(Value, Value, bool)> tile) -> Value {
        Value first =
            tile(wb.index(0), LLVM::UndefOp::create(b, accumulatorType),
                 /*overwrite=*/true);
        return wb.loop(
            wb.index(1), numSteps, {first},
            [&](Value step, ValueRange carried) -> SmallVector<Value> {
              return {tile(step, carried[0], /*overwrite=*/false)};
            })[0];
      };
      auto waitFull = [&](Value step) {
        nvgpu::MBarrierTryWaitParityOp::create(b, full, parityOf(step, 0),
                                               wb.index(kMbarrierWaitTicks),
                                               stageOf(step));
      };

      // The epilogue on the accumulator registers: gated activation, routed
      // weight, and the store in the op's row order.
      auto emitEpilogue = [&](Value accumulators, Value laneRow,
                              Value laneColumn) {
        Type outputElement =
            cast<MemRefType>(output.getType()).getElementType();
        auto pairType = VectorType::get({2}, f32);
        for (int64_t half = 0; half < 2; ++half) {
          Value rowInBlock =
              arith::AddIOp::create(b, laneRow, wb.index(half * 8));
          auto [slot, routed] = slotOf(rowInBlock);
          Value row = arith::AddIOp::create(b, firstRow, rowInBlock);
          Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
          Value slotInToken = arith::RemUIOp::create(b, slot, wb.index(slots));
          wb.ifThen(routed, [&] {
            Value weight = weighted
                               ? wb.load(routedWeights, {token, slotInToken})
                               : Value();
            for (int64_t block = 0; block < outputColumnsPerBlock / 8;
                 ++block) {
              Value column = arith::AddIOp::create(
                  b, firstColumn,
                  arith::AddIOp::create(b, laneColumn, wb.index(block * 8)));
              SmallVector<Value> values;
              for (int64_t i = 0; i < 2; ++i) {
                int64_t index = block * 4 + half * 2 + i;
                Value value =
                    LLVM::ExtractValueOp::create(b, accumulators, index);
                if (gated)
                  value = arith::MulFOp::create(
                      b, emitGatedActivation(b, b.getLoc(), activation, value),
                      LLVM::ExtractValueOp::create(b, accumulators,
                                                   index + registers / 2));
                if (weight)
                  value = arith::MulFOp::create(b, value, weight);
                values.push_back(value);
              }
              SmallVector<Value> at =
                  slotOutput ? SmallVector<Value>{token, slotInToken, column}
                             : SmallVector<Value>{row, column};
              if (columns % 2 == 0) {
                // Two neighbouring columns in one 4-byte store.
                Value pair =
                    vector::FromElementsOp::create(b, pairType, values);
                if (outputElement != f32)
                  pair = arith::TruncFOp::create(
                      b, VectorType::get({2}, outputElement), pair);
                wb.ifThen(
                    wb.cmpi(arith::CmpIPredicate::ult, column,
                            wb.index(columns)),
                    [&] {
                      // Even columns of even-length rows: the pair is aligned
                      // to its size (the runtime checks the base alignment).
                      vector::StoreOp::create(
                          b, pair, output, at, /*nontemporal=*/false,
                          llvm::Align(
                              2 * outputElement.getIntOrFloatBitWidth() / 8));
                    });
                continue;
              }
              for (int64_t i = 0; i < 2; ++i) {
                at.back() = arith::AddIOp::create(b, column, wb.index(i));
                wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, at.back(),
                                  wb.index(columns)),
                          [&] { wb.storeF32(values[i], output, at); });
              }
            }
          });
        }
      };

      // The consumers' part from their accumulators: the split's partial sums,
      // or the epilogue.
      auto finish = [&](Value accumulators) {
        // Register 4 j + i of a thread holds row 16 warp + lane / 4 + 8 (i /
        // 2), column 8 j + 2 (lane % 4) + i % 2 of the block's accumulators
        // (the consumers are the first warpgroups: consumer c's rows start at
        // 64 c).
        Value laneRow = arith::AddIOp::create(
            b, arith::MulIOp::create(b, warp, wb.index(16)),
            arith::DivUIOp::create(b, lane, wb.index(4)));
        Value laneColumn = arith::MulIOp::create(
            b, arith::RemUIOp::create(b, lane, wb.index(4)), wb.index(2));
        if (reduction) {
          storePartials(wb, accumulators, laneRow, laneColumn, firstRow,
                        firstColumn, split, slotOf, partials, slotRows, op,
                        config);
          return;
        }
        emitEpilogue(accumulators, laneRow, laneColumn);
      };

      if (!warpSpecialized) {
        // Every thread loads and multiplies: stages 0..S-2 in flight, then
        // per K tile: wait for it, multiply, let the previous tile's wgmmas
        // finish, and after a block barrier refill the stage they read.
        SmallVector<std::pair<Value, Value>> sources;
        if (tokenInput)
          sources = gatherSources();
        // Every thread commits one cp.async group per call so that the group
        // counts stay uniform.
        auto issue = [&](Value step) {
          wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, step, numSteps),
                    [&] { loadTile(step, sources); });
          if (tokenInput)
            NVVM::CpAsyncCommitGroupOp::create(b);
        };
        for (int64_t step = 0; step + 1 < stages; ++step)
          issue(wb.index(step));
        if (tokenInput)
          awaitGathers(stages - 2);
        gpu::BarrierOp::create(b);
        Value consumer =
            arith::DivUIOp::create(b, tid, wb.index(kWarpgroupThreads));
        Value accumulators =
            accumulate([&](Value step, Value sum, bool overwrite) -> Value {
              waitFull(step);
              sum = multiplyTile(step, consumer, sum, overwrite);
              // The previous step's group is done in this warp; after
              // the barrier in all, so its stage takes K tile
              // step + stages - 1.
              NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
              if (tokenInput)
                awaitGathers(stages - 3);
              gpu::BarrierOp::create(b);
              issue(arith::AddIOp::create(b, step, wb.index(stages - 1)));
              return sum;
            });
        NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
        finish(accumulators);
        return;
      }

      // Warp-specialized: the last warpgroup loads, the others multiply (the
      // consumers keep the thread numbering of the kernel without a
      // producer). The producer refills a stage once `empty` says the
      // consumers are done with it; gathering threads report their rows on
      // `full` `lag` K tiles later, after their own cp.async wait and proxy
      // fence, which keeps lag + 1 tiles of gathers in flight per thread
      // (lag = stages - 2 leaves the ring a free stage, so neither side waits
      // on the other forever).
      int64_t lag = stages - 2;
      // The warpgroup index, broadcast from lane 0 so that ptxas sees the
      // role branches as warp-uniform: wgmma in a path it thinks divergent
      // gets serialized (C7520).
      Value warpgroupIndex =
          wb.toIndex(gpu::ShuffleOp::create(
                         b,
                         wb.toI32(arith::DivUIOp::create(
                             b, tid, wb.index(kWarpgroupThreads))),
                         wb.i32(0), wb.i32(32),
                         gpu::ShuffleModeAttr::get(ctx, gpu::ShuffleMode::IDX))
                         .getShuffleResult());
      Value producer = wb.cmpi(arith::CmpIPredicate::eq, warpgroupIndex,
                               wb.index(warpgroups));
      // Only threads that load wait on `empty`: a parity wait is ambiguous
      // once the barrier has moved on two phases, which an idle thread could
      // let happen (and then wait forever). Gathering threads cannot fall
      // behind: every K tile needs their arrival on `full`.
      if (!tokenInput)
        producer = arith::AndIOp::create(b, producer, leader);
      wb.ifThen(producer, [&] {
        SmallVector<std::pair<Value, Value>> sources;
        if (tokenInput)
          sources = gatherSources();
        auto reportRows = [&](Value step) {
          nvgpu::MBarrierArriveOp::create(b, full, stageOf(step));
        };
        wb.loop(wb.index(0), numSteps, [&](Value step) {
          wb.ifThen(wb.cmpi(arith::CmpIPredicate::uge, ringStep(step),
                            wb.index(stages)),
                    [&] {
                      nvgpu::MBarrierTryWaitParityOp::create(
                          b, empty, parityOf(step, -1),
                          wb.index(kMbarrierWaitTicks), stageOf(step));
                    });
          loadTile(step, sources);
          if (!tokenInput)
            return;
          NVVM::CpAsyncCommitGroupOp::create(b);
          wb.ifThen(wb.cmpi(arith::CmpIPredicate::uge, step, wb.index(lag)),
                    [&] {
                      awaitGathers(lag);
                      reportRows(arith::SubIOp::create(b, step, wb.index(lag)));
                    });
        });
        if (!tokenInput)
          return;
        awaitGathers(0);
        Value first = arith::SubIOp::create(
            b, arith::MaxSIOp::create(b, numSteps, wb.index(lag)),
            wb.index(lag));
        wb.loop(first, numSteps, [&](Value step) { reportRows(step); });
      });
      wb.ifThen(
          wb.cmpi(arith::CmpIPredicate::ult, warpgroupIndex,
                  wb.index(warpgroups)),
          [&] {
            Value consumer = warpgroupIndex;
            Value accumulators =
                accumulate([&](Value step, Value sum, bool overwrite) -> Value {
                  waitFull(step);
                  sum = multiplyTile(step, consumer, sum, overwrite);
                  // The previous K tile's wgmmas are done: free its stage.
                  NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
                  if (!overwrite)
                    nvgpu::MBarrierArriveOp::create(
                        b, empty,
                        stageOf(arith::SubIOp::create(b, step, wb.index(1))));
                  return sum;
                });
            NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
            // The block's next tile goes on in the ring: free the last
            // stage too.
            if (ringBase)
              nvgpu::MBarrierArriveOp::create(
                  b, empty,
                  stageOf(arith::SubIOp::create(b, numSteps, wb.index(1))));
            finish(accumulators);
          });
    });
    return ringBase ? arith::AddIOp::create(
                          b, ringBase, wb.select(active, numSteps, wb.index(0)))
                          .getResult()
                    : Value();
  };

  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  if (!config.getPersistent()) {
    // One block per tile of the row blocks the capacity bounds; those past
    // the padded rows find nothing to do.
    runTile(blockId,
            arith::CeilDivUIOp::create(
                b,
                arith::AddIOp::create(b, routedSlots,
                                      wb.index(numExperts * (blockM - 1))),
                wb.index(blockRows)),
            Value());
  } else {
    // Persistent: the blocks walk the tiles of the padded rows, counted on
    // the device (a multiple of block_m, so of the tile rows), a grid apart.
    Value numRowBlocks = arith::DivUIOp::create(
        b, wb.toIndex(wb.load(padded, {})), wb.index(blockRows));
    Value numTiles = arith::MulIOp::create(b, numRowBlocks,
                                           wb.index(numColumnTiles * splits));
    initRing();
    auto tiles = scf::ForOp::create(
        b, blockId, numTiles, gpu::GridDimOp::create(b, gpu::Dimension::x),
        ValueRange{wb.index(0)});
    OpBuilder::InsertionGuard loopGuard(b);
    b.setInsertionPointToStart(tiles.getBody());
    // Without a producer, every thread refills the ring: all must be done
    // with the previous tile's stages first.
    if (!warpSpecialized)
      gpu::BarrierOp::create(b);
    scf::YieldOp::create(b, runTile(tiles.getInductionVar(), numRowBlocks,
                                    tiles.getRegionIterArgs()[0]));
  }
  if (reduction)
    emitSplitReduction(plan, builder, op, splits, *reduction);
  return success();
}

} // namespace

LogicalResult mlir::moe::detail::emitGroupedMatmul(PlanBuilder &plan,
                                                   OpBuilder &builder,
                                                   GroupedMatmulOp op) {
  // The tensor-core kernel is built from the op's tiling (moe-tile) and
  // descriptors (moe-tma); ops it cannot run get the SIMT kernel.
  if (!hasTensorCoreKernel(op)) {
    if (op.getConfigAttr())
      return op.emitOpError() << "has a config but no tensor-core kernel "
                                 "(bf16/f16, rows of 16-byte multiples, a "
                                 "power-of-two block_m in [16, 256])";
    return emitSimtGroupedMatmul(plan, builder, op);
  }
  if (GemmConfigAttr config = op.getConfigAttr())
    return emitWgmmaGroupedMatmul(plan, builder, op, config);
  return op.emitOpError()
         << "has no #moe.gemm_config for its tensor-core kernel (run moe-tile "
            "and moe-tma)";
}
