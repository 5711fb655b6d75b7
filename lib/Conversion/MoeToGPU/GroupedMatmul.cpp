//===- GroupedMatmul.cpp - moe.grouped_matmul to GPU kernels --------------===//

#include "PlanBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"

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
/// orders.
LogicalResult emitSimtGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
                                    GroupedMatmulOp op) {
  OpBuilder::InsertionGuard guard(builder);
  RankedTensorType weightsType = op.getWeightsType();
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

  SizeExpr capacity = plan.affine(slots, numExperts * (blockM - 1));
  unsigned sortedIds = plan.use(op.getSortedIds());
  unsigned expertIds = plan.use(op.getExpertIds());
  unsigned rows = plan.use(op.getInput());
  plan.refineInput(sortedIds, {capacity});
  plan.refineInput(expertIds, {PlanBuilder::ceilDiv(capacity, blockM)});
  if (!tokenInput)
    plan.refineInput(rows, {capacity, PlanBuilder::constant(k)});
  // Weight tiles come through one 3-D TMA descriptor over [E, N, K], the
  // expert its outer coordinate, built once by the runtime and passed by
  // value, when the rows are the 16-byte multiples TMA needs; else the
  // threads load them. Sorted input rows are contiguous, so their tiles come
  // through a 2-D descriptor over [C, K] as well; gathered token rows are
  // loaded by the threads.
  int64_t elementBytes = weightsType.getElementTypeBitWidth() / 8;
  bool weightsByTma = (k * elementBytes) % 16 == 0;
  bool rowsByTma = weightsByTma && !tokenInput;
  unsigned weightsBuffer = plan.use(op.getWeights());
  KernelArg weightsArg =
      weightsByTma
          ? KernelArg::tensorMap(plan.tensorMap(weightsBuffer, "weight_map",
                                                {kGemmTileK, kGemmTileN, 1},
                                                /*swizzleBytes=*/0))
          : KernelArg(weightsBuffer);
  KernelArg rowsArg = rowsByTma ? KernelArg::tensorMap(plan.tensorMap(
                                      rows, "input_map", {kGemmTileK, blockM},
                                      /*swizzleBytes=*/0))
                                : KernelArg(rows);
  int64_t weightTileBytes = kGemmTileN * kGemmTileK * elementBytes;
  int64_t numWeightTiles = gated ? 2 : 1;
  int64_t rowTileBytes = blockM * kGemmTileK * elementBytes;
  // The bytes TMA brings in per K step, into the dynamic shared memory.
  int64_t tmaStepBytes = (weightsByTma ? numWeightTiles * weightTileBytes : 0) +
                         (rowsByTma ? rowTileBytes : 0);
  SmallVector<KernelArg> args = {rowsArg, weightsArg, sortedIds, expertIds,
                                 plan.use(op.getNumPadded())};
  if (weighted)
    args.push_back(plan.use(op.getRoutedWeights()));
  SmallVector<SizeExpr> outputDims =
      slotOutput
          ? SmallVector<SizeExpr>{plan.tokens(), PlanBuilder::constant(slots),
                                  PlanBuilder::constant(columns)}
          : SmallVector<SizeExpr>{capacity, PlanBuilder::constant(columns)};
  args.push_back(plan.define(op.getOutput(), "gemm_output", outputDims));
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
      {threads, 1, 1}, shared, tmaStepBytes);

  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder wb{b};
  Value input = kernel.getArgument(0), weights = kernel.getArgument(1);
  // The TMA destinations are views of the dynamic shared memory, shaped as
  // their descriptor's box: the weight tiles (gate, then up) [1, 64, 16],
  // then the row tile [block_m, 16].
  Value sharedBase =
      tmaStepBytes ? dynamicSharedMemory(b, plan.kernels) : Value();
  int64_t sharedOffset = 0;
  auto tmaTile = [&](ArrayRef<int64_t> box) {
    auto type = MemRefType::get(box, weightsType.getElementType(),
                                MemRefLayoutAttrInterface(),
                                b.getI64IntegerAttr(kSharedAddressSpace));
    Value view = memref::ViewOp::create(b, type, sharedBase,
                                        wb.index(sharedOffset), ValueRange());
    sharedOffset += type.getNumElements() * elementBytes;
    return view;
  };
  // The descriptor behind kernel argument `pointer`, for tiles like `tile`.
  auto descriptor = [&](Value pointer, Value tile) -> Value {
    auto type = nvgpu::TensorMapDescriptorType::get(
        b.getContext(), cast<MemRefType>(tile.getType()),
        nvgpu::TensorMapSwizzleKind::SWIZZLE_NONE,
        nvgpu::TensorMapL2PromoKind::L2PROMO_NONE,
        nvgpu::TensorMapOOBKind::OOB_ZERO,
        nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
    return UnrealizedConversionCastOp::create(b, type, pointer).getResult(0);
  };
  SmallVector<Value> weightTiles;
  Value weightMap, rowTile, rowMap;
  if (weightsByTma) {
    for (int64_t tile = 0; tile < numWeightTiles; ++tile)
      weightTiles.push_back(tmaTile({1, kGemmTileN, kGemmTileK}));
    weightMap = descriptor(weights, weightTiles.front());
  }
  if (rowsByTma) {
    rowTile = tmaTile({blockM, kGemmTileK});
    rowMap = descriptor(input, rowTile);
  }
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
    Value leader = wb.cmpi(arith::CmpIPredicate::eq, tid, wb.index(0));
    // One mbarrier counts the weight tiles' bytes of each K step in; its
    // phase flips every step. Initialised by one thread before anyone uses
    // it.
    Value barrier;
    if (weightsByTma) {
      barrier = nvgpu::MBarrierCreateOp::create(
          b, nvgpu::MBarrierGroupType::get(
                 b.getContext(), b.getI64IntegerAttr(kSharedAddressSpace)));
      wb.ifThen(leader, [&] {
        nvgpu::TmaPrefetchOp::create(b, weightMap, Value());
        nvgpu::MBarrierInitOp::create(b, barrier, wb.index(1), wb.index(0),
                                      Value());
      });
      gpu::BarrierOp::create(b);
    }
    int64_t accumulators = rowsPerThread * kGemmColumnsPerThread;
    SmallVector<Value> inits(gated ? 2 * accumulators : accumulators, zero);
    SmallVector<Value> sums = wb.loop(
        wb.index(0), wb.index(k), inits,
        [&](Value k0, ValueRange carried) -> SmallVector<Value> {
          // The weight tiles of this step (gate, then up at column +
          // columns) and the sorted row tile are in flight while the threads
          // stage gathered A rows; TMA fills what lies past N, K or C with
          // zeros.
          if (weightsByTma)
            wb.ifThen(leader, [&] {
              nvgpu::MBarrierArriveExpectTxOp::create(
                  b, barrier, wb.index(tmaStepBytes), wb.index(0), Value());
              for (int64_t tile = 0; tile < numWeightTiles; ++tile)
                nvgpu::TmaAsyncLoadOp::create(
                    b, weightTiles[tile], barrier, weightMap,
                    ValueRange{k0,
                               arith::AddIOp::create(b, firstColumn,
                                                     wb.index(tile * columns)),
                               expert},
                    wb.index(0), Value(), Value());
              if (rowsByTma)
                nvgpu::TmaAsyncLoadOp::create(b, rowTile, barrier, rowMap,
                                              ValueRange{k0, firstRow},
                                              wb.index(0), Value(), Value());
            });
          auto waitForTma = [&] {
            Value step = arith::DivUIOp::create(b, k0, wb.index(kGemmTileK));
            Value parity = arith::IndexCastOp::create(
                b, b.getI1Type(), arith::RemUIOp::create(b, step, wb.index(2)));
            nvgpu::MBarrierTryWaitParityOp::create(
                b, barrier, parity, wb.index(kMbarrierWaitTicks), wb.index(0));
          };
          if (rowsByTma)
            waitForTma();
          // Stage the A rows (gathered, zero for padding rows, which TMA
          // loads as whatever they hold) and the B columns of this K step in
          // shared memory, as f32.
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
                rowsByTma ? wb.loadF32(rowTile, {i, kk})
                          : wb.loadF32(input,
                                       {wb.select(valid, source, wb.index(0)),
                                        wb.select(valid, kIndex, wb.index(0))});
            wb.store(wb.select(valid, value, zero), tileA, {i, kk});
          }
          if (weightsByTma && !rowsByTma)
            waitForTma();
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
              if (weightsByTma)
                return wb.loadF32(weightTiles[tile], {wb.index(0), jj, kk});
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

} // namespace

LogicalResult mlir::moe::detail::emitGroupedMatmul(PlanBuilder &plan,
                                                   OpBuilder &builder,
                                                   GroupedMatmulOp op) {
  return emitSimtGroupedMatmul(plan, builder, op);
}
