//===- MoeToGPU.cpp - moe ops to GPU kernels and a launch plan ------------===//

#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "PlanBuilder.h"
#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/Conversion/MoeCommon/RoutingMath.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_CONVERTMOETOGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

constexpr int64_t kWarpSize = 32;

/// Warp-level helpers on top of LoopBuilder.
struct WarpBuilder : LoopBuilder {
  Value lane;    // index
  Value laneI32; // i32

  Value shuffleXor(Value value, int64_t offset) {
    return gpu::ShuffleOp::create(b, value, static_cast<int32_t>(offset),
                                  static_cast<int32_t>(kWarpSize),
                                  gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }
  Value shuffleFrom(Value value, Value sourceLane) {
    return gpu::ShuffleOp::create(
               b, value, sourceLane, i32(kWarpSize),
               gpu::ShuffleModeAttr::get(b.getContext(), gpu::ShuffleMode::IDX))
        .getShuffleResult();
  }
  /// `combine` over the warp with a butterfly (offsets 1, 2, 4, 8, 16): lane
  /// groups combine in index order, so an fp sum is the pairwise sum that
  /// kSoftmaxSumLanes defines, identical in every lane.
  Value allReduce(Value value, function_ref<Value(Value, Value)> combine) {
    for (int64_t offset = 1; offset < kWarpSize; offset *= 2)
      value = combine(value, shuffleXor(value, offset));
    return value;
  }
  /// The order-preserving 32-bit image of an f32 score, compared unsigned:
  /// larger scores give larger keys, NaN gives 0 (below every number), and
  /// -0 and +0 give one key, as they tie in the op's order.
  Value orderedKey(Value value) {
    Value canonical = arith::AddFOp::create(b, value, f32(0.0)); // -0 -> +0
    Value bits = arith::BitcastOp::create(b, b.getI32Type(), canonical);
    Value positive = cmpi(arith::CmpIPredicate::sge, bits, i32(0));
    Value ordered =
        select(positive, arith::XOrIOp::create(b, bits, i32(INT32_MIN)),
               arith::XOrIOp::create(b, bits, i32(-1)));
    return select(isNaN(value), i32(0), ordered);
  }
  /// The score of a key (NaN for 0).
  Value scoreOfKey(Value key) {
    Value wasPositive = cmpi(arith::CmpIPredicate::slt, key, i32(0));
    Value bits =
        select(wasPositive, arith::XOrIOp::create(b, key, i32(INT32_MIN)),
               arith::XOrIOp::create(b, key, i32(-1)));
    return arith::BitcastOp::create(b, b.getF32Type(), bits);
  }

  /// An expert in the running for selection: its key and id. "None" is
  /// (0, INT32_MAX), below every candidate, NaN ones included.
  struct Candidate {
    Value key, expert;
  };
  Candidate none() { return {i32(0), i32(INT32_MAX)}; }
  /// The better of two candidates: the larger key, then the lower expert.
  Candidate better(Candidate a, Candidate c) {
    Value larger = cmpi(arith::CmpIPredicate::ugt, c.key, a.key);
    Value tieLower = arith::AndIOp::create(
        b, cmpi(arith::CmpIPredicate::eq, c.key, a.key),
        cmpi(arith::CmpIPredicate::slt, c.expert, a.expert));
    Value take = arith::OrIOp::create(b, larger, tieLower);
    return {select(take, c.key, a.key), select(take, c.expert, a.expert)};
  }
  /// redux.sync `kind` of the i32 `value` over the full warp (sm_80+): one
  /// instruction where a butterfly takes five shuffles.
  Value redux(NVVM::ReduxKind kind, Value value) {
    return NVVM::ReduxOp::create(b, b.getI32Type(), value,
                                 NVVM::ReduxKindAttr::get(b.getContext(), kind),
                                 i32(-1));
  }
  /// The best candidate of the warp, in every lane: the largest key, then
  /// among its holders the lowest expert.
  Candidate warpBest(Candidate candidate) {
    Value key = redux(NVVM::ReduxKind::UMAX, candidate.key);
    Value holds = cmpi(arith::CmpIPredicate::eq, candidate.key, key);
    Value expert = redux(NVVM::ReduxKind::UMIN,
                         select(holds, candidate.expert, i32(INT32_MAX)));
    return {key, expert};
  }
  /// The two largest keys of the warp (as a multiset), from each lane's two
  /// largest (`first` >= `second`, unsigned).
  std::pair<Value, Value> warpTopTwo(Value first, Value second) {
    Value top = redux(NVVM::ReduxKind::UMAX, first);
    Value holds = cmpi(arith::CmpIPredicate::eq, first, top);
    // One holder of the top gives up its first for its second; a second
    // holder makes the runner-up equal to the top.
    Value holders = redux(NVVM::ReduxKind::ADD, select(holds, i32(1), i32(0)));
    Value runnerUp = redux(NVVM::ReduxKind::UMAX, select(holds, second, first));
    return {top, select(cmpi(arith::CmpIPredicate::uge, holders, i32(2)), top,
                        runnerUp)};
  }
};

WarpBuilder makeWarpBuilder(ImplicitLocOpBuilder &b) {
  WarpBuilder wb{{b}, Value(), Value()};
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  wb.lane = arith::RemUIOp::create(b, tid, wb.index(kWarpSize));
  wb.laneI32 = wb.toI32(wb.lane);
  return wb;
}

//===----------------------------------------------------------------------===//
// moe.gate
//===----------------------------------------------------------------------===//

constexpr int64_t kGateWarpsPerBlock = 4;
constexpr int64_t kMaxExpertsPerLane = 32;

/// One warp per token: scores, grouped top-k and the weights of moe.gate.
LogicalResult emitGate(PlanBuilder &plan, OpBuilder &builder, GateOp op) {
  OpBuilder::InsertionGuard guard(builder);
  RouterAttr router = op.getRouter();
  auto logitsType = cast<RankedTensorType>(op.getLogits().getType());
  int64_t numExperts = logitsType.getDimSize(1);
  int64_t numGroups = router.getNumGroups(), topK = router.getTopK();
  int64_t groupSize = numExperts / numGroups;
  int64_t perLane = llvm::divideCeil(numExperts, kWarpSize);
  // A lane keeps its experts in registers: 32 per lane at most.
  if (perLane > kMaxExpertsPerLane)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kMaxExpertsPerLane * kWarpSize << " experts";
  bool hasBias = static_cast<bool>(op.getCorrectionBias());
  SizeExpr t = plan.tokens();
  int64_t slots = router.getNumSlots();

  SmallVector<KernelArg> args = {plan.use(op.getLogits())};
  if (hasBias)
    args.push_back(plan.use(op.getCorrectionBias()));
  args.push_back(plan.define(op.getWeights(), "gate_weights",
                             {t, PlanBuilder::constant(slots)}));
  args.push_back(
      plan.define(op.getIds(), "gate_ids", {t, PlanBuilder::constant(slots)}));
  gpu::GPUFuncOp kernel =
      plan.createKernel(builder, op.getLoc(), "moe_gate", args,
                        {PlanBuilder::ceilDiv(t, kGateWarpsPerBlock),
                         PlanBuilder::constant(1), PlanBuilder::constant(1)},
                        {kGateWarpsPerBlock * kWarpSize, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value logits = kernel.getArgument(0);
  Value bias = hasBias ? kernel.getArgument(1) : Value();
  Value weights = kernel.getArgument(hasBias ? 2 : 1);
  Value ids = kernel.getArgument(hasBias ? 3 : 2);
  Value numTokens = wb.toIndex(tokenCount(kernel));

  Value warp = arith::DivUIOp::create(
      b, gpu::ThreadIdOp::create(b, gpu::Dimension::x), wb.index(kWarpSize));
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kGateWarpsPerBlock)),
      warp);
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, token, numTokens), [&] {
    Location loc = b.getLoc();
    Value trueValue = arith::ConstantIntOp::create(b, b.getI1Type(), 1);
    // Lane l holds experts l, l + 32, ...
    SmallVector<Value> experts, expertsI32, valid, x;
    for (int64_t j = 0; j < perLane; ++j) {
      Value expert = arith::AddIOp::create(b, wb.lane, wb.index(j * kWarpSize));
      bool allValid = (j + 1) * kWarpSize <= numExperts;
      Value isValid = allValid ? trueValue
                               : wb.cmpi(arith::CmpIPredicate::ult, expert,
                                         wb.index(numExperts));
      Value safe = allValid ? expert : wb.select(isValid, expert, wb.index(0));
      experts.push_back(expert);
      expertsI32.push_back(wb.toI32(expert));
      valid.push_back(isValid);
      x.push_back(wb.loadF32(logits, {token, safe}));
    }

    SmallVector<Value> scores(perLane);
    if (router.getScoring() == Scoring::sigmoid) {
      for (int64_t j = 0; j < perLane; ++j)
        scores[j] = emitRoutingSigmoid(b, loc, x[j]);
    } else {
      Value negInf = wb.f32(-std::numeric_limits<float>::infinity());
      Value max = negInf;
      for (int64_t j = 0; j < perLane; ++j)
        max = arith::MaximumFOp::create(b, max,
                                        wb.select(valid[j], x[j], negInf));
      max = wb.allReduce(max, [&](Value l, Value r) {
        return arith::MaximumFOp::create(b, l, r).getResult();
      });
      Value partial = wb.f32(0.0);
      SmallVector<Value> p(perLane);
      for (int64_t j = 0; j < perLane; ++j) {
        p[j] = wb.select(
            valid[j],
            emitRoutingExp(b, loc, arith::SubFOp::create(b, x[j], max)),
            wb.f32(0.0));
        partial = arith::AddFOp::create(b, partial, p[j]);
      }
      Value sum = wb.allReduce(partial, [&](Value l, Value r) {
        return arith::AddFOp::create(b, l, r).getResult();
      });
      for (int64_t j = 0; j < perLane; ++j)
        scores[j] = arith::DivFOp::create(b, p[j], sum);
    }
    SmallVector<Value> selection(scores);
    if (bias)
      for (int64_t j = 0; j < perLane; ++j)
        selection[j] = arith::AddFOp::create(
            b, scores[j],
            wb.load(bias, wb.select(valid[j], experts[j], wb.index(0))));
    SmallVector<Value> keys;
    for (int64_t j = 0; j < perLane; ++j)
      keys.push_back(wb.orderedKey(selection[j]));
    Value noKey = wb.i32(0);

    SmallVector<Value> eligible(valid);
    if (numGroups > 1) {
      // A group's score: the sum of its two largest selection scores. All
      // groups reduce at once, on keys alone: the multiset top-2 needs no
      // expert ids.
      bool staticGroups = groupSize % kWarpSize == 0;
      SmallVector<Value> groupOf;
      for (int64_t j = 0; j < perLane; ++j)
        groupOf.push_back(
            staticGroups
                ? wb.i32(j * kWarpSize / groupSize)
                : arith::DivUIOp::create(b, expertsI32[j], wb.i32(groupSize))
                      .getResult());
      SmallVector<Value> groupScores;
      for (int64_t g = 0; g < numGroups; ++g) {
        Value first = noKey, second = noKey;
        for (int64_t j = 0; j < perLane; ++j) {
          if (staticGroups && j * kWarpSize / groupSize != g)
            continue;
          Value member = valid[j];
          if (!staticGroups)
            member = arith::AndIOp::create(
                b, member,
                wb.cmpi(arith::CmpIPredicate::eq, groupOf[j], wb.i32(g)));
          Value key = wb.select(member, keys[j], noKey);
          second = arith::MaxUIOp::create(
              b, second, arith::MinUIOp::create(b, first, key));
          first = arith::MaxUIOp::create(b, first, key);
        }
        auto [top, runnerUp] = wb.warpTopTwo(first, second);
        groupScores.push_back(arith::AddFOp::create(b, wb.scoreOfKey(top),
                                                    wb.scoreOfKey(runnerUp)));
      }
      // Keep the topk_groups best groups: warp-uniform, so no shuffles.
      SmallVector<Value> kept(
          numGroups, arith::ConstantIntOp::create(b, b.getI1Type(), 0));
      SmallVector<Value> groupKeys;
      for (Value score : groupScores)
        groupKeys.push_back(wb.orderedKey(score));
      for (int64_t round = 0; round < router.getTopkGroups(); ++round) {
        WarpBuilder::Candidate best = wb.none();
        for (int64_t g = 0; g < numGroups; ++g)
          best = wb.better(best,
                           {wb.select(kept[g], noKey, groupKeys[g]),
                            wb.select(kept[g], wb.i32(INT32_MAX), wb.i32(g))});
        for (int64_t g = 0; g < numGroups; ++g)
          kept[g] = arith::OrIOp::create(
              b, kept[g],
              wb.cmpi(arith::CmpIPredicate::eq, best.expert, wb.i32(g)));
      }
      for (int64_t j = 0; j < perLane; ++j) {
        Value keptGroup = arith::ConstantIntOp::create(b, b.getI1Type(), 0);
        if (staticGroups) {
          keptGroup = kept[j * kWarpSize / groupSize];
        } else {
          for (int64_t g = 0; g < numGroups; ++g)
            keptGroup = wb.select(
                wb.cmpi(arith::CmpIPredicate::eq, groupOf[j], wb.i32(g)),
                kept[g], keptGroup);
        }
        eligible[j] = arith::AndIOp::create(b, valid[j], keptGroup);
      }
    }

    // top_k rounds of arg-max over the remaining candidates; the winner
    // leaves the running, and its unbiased score comes from the lane that
    // holds it (or from its key, when selection and score agree).
    SmallVector<WarpBuilder::Candidate> candidates;
    for (int64_t j = 0; j < perLane; ++j)
      candidates.push_back(
          {wb.select(eligible[j], keys[j], noKey),
           wb.select(eligible[j], expertsI32[j], wb.i32(INT32_MAX))});
    SmallVector<Value> slotIds, slotWeights;
    Value sum = wb.f32(0.0);
    for (int64_t s = 0; s < topK; ++s) {
      // A lane's experts increase with j, so a strictly larger key decides
      // within the lane; warpBest settles ties across lanes.
      WarpBuilder::Candidate best = candidates.front();
      for (const WarpBuilder::Candidate &candidate :
           llvm::drop_begin(candidates)) {
        Value larger =
            wb.cmpi(arith::CmpIPredicate::ugt, candidate.key, best.key);
        best = {wb.select(larger, candidate.key, best.key),
                wb.select(larger, candidate.expert, best.expert)};
      }
      best = wb.warpBest(best);
      Value expert = best.expert;
      Value score = wb.scoreOfKey(best.key);
      if (bias) {
        Value slotInLane = arith::DivUIOp::create(b, expert, wb.i32(kWarpSize));
        Value mine = wb.f32(0.0);
        for (int64_t j = 0; j < perLane; ++j)
          mine = wb.select(
              wb.cmpi(arith::CmpIPredicate::eq, slotInLane, wb.i32(j)),
              scores[j], mine);
        score = wb.shuffleFrom(
            mine, arith::RemUIOp::create(b, expert, wb.i32(kWarpSize)));
      }
      for (WarpBuilder::Candidate &candidate : candidates) {
        Value won = wb.cmpi(arith::CmpIPredicate::eq, candidate.expert, expert);
        candidate = {wb.select(won, noKey, candidate.key),
                     wb.select(won, wb.i32(INT32_MAX), candidate.expert)};
      }
      Value weight = wb.select(wb.isNaN(score), wb.f32(0.0), score);
      sum = arith::AddFOp::create(b, sum, weight);
      slotIds.push_back(expert);
      slotWeights.push_back(weight);
    }
    double scale = router.getRoutedScalingFactor().convertToDouble();
    Value denominator =
        router.getRenormalize()
            ? arith::AddFOp::create(b, sum, wb.f32(1e-20)).getResult()
            : Value();
    for (Value &weight : slotWeights) {
      if (denominator)
        weight = arith::DivFOp::create(b, weight, denominator);
      if (scale != 1.0)
        weight = arith::MulFOp::create(b, weight, wb.f32(scale));
    }
    for (int64_t i = 0; i < router.getNumSharedExperts(); ++i) {
      slotIds.push_back(wb.i32(numExperts + i));
      slotWeights.push_back(wb.f32(1.0));
    }
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)), [&] {
      for (int64_t s = 0; s < slots; ++s) {
        wb.store(slotIds[s], ids, {token, wb.index(s)});
        wb.store(slotWeights[s], weights, {token, wb.index(s)});
      }
    });
  });
  return success();
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

constexpr int64_t kRouteThreads = 512;
constexpr int64_t kRouteWarps = kRouteThreads / kWarpSize;
constexpr int64_t kScanThreads = 1024;

/// Emits `for i = start; i < end; i += step` (index values).
void strided(LoopBuilder &lb, Value start, Value end, int64_t step,
             function_ref<void(Value)> body) {
  auto forOp = scf::ForOp::create(lb.b, start, end, lb.index(step));
  OpBuilder::InsertionGuard guard(lb.b);
  lb.b.setInsertionPointToStart(forOp.getBody());
  body(forOp.getInductionVar());
}

/// Counting sort on the device: histogram, scan, stable placement.
LogicalResult emitRoute(PlanBuilder &plan, OpBuilder &builder, RouteOp op) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t numExperts = op.getNumExperts(), blockM = op.getBlockM();
  int64_t slots = cast<RankedTensorType>(op.getIds().getType()).getDimSize(1);
  if (numExperts > kScanThreads)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kScanThreads << " experts";
  Location loc = op.getLoc();
  Type i32 = builder.getI32Type();
  SizeExpr routed = plan.affine(slots, 0);
  SizeExpr capacity = plan.affine(slots, numExperts * (blockM - 1));
  SizeExpr chunks = PlanBuilder::ceilDiv(routed, kRouteThreads);
  SizeExpr experts = PlanBuilder::constant(numExperts);

  unsigned ids = plan.use(op.getIds());
  unsigned sortedIds =
      plan.define(op.getSortedIds(), "route_sorted_ids", {capacity});
  unsigned expertIds = plan.define(op.getExpertIds(), "route_expert_ids",
                                   {PlanBuilder::ceilDiv(capacity, blockM)});
  unsigned numPadded = plan.define(op.getNumPadded(), "route_num_padded", {});
  unsigned blockOffsets =
      plan.scratch("route_block_offsets", i32, {chunks, experts});
  unsigned expertOffsets = plan.scratch("route_expert_offsets", i32, {experts});

  // Slot `slot` of the chunk, its expert, and whether that is in range.
  auto loadSlot = [&](WarpBuilder &wb, Value idsBuffer,
                      Value numTokens) -> std::tuple<Value, Value, Value> {
    ImplicitLocOpBuilder &b = wb.b;
    Value slot = arith::AddIOp::create(
        b,
        arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                              wb.index(kRouteThreads)),
        gpu::ThreadIdOp::create(b, gpu::Dimension::x));
    Value inRange =
        wb.cmpi(arith::CmpIPredicate::ult, slot,
                arith::MulIOp::create(b, numTokens, wb.index(slots)));
    Value safe = wb.select(inRange, slot, wb.index(0));
    Value expert =
        wb.load(idsBuffer, {arith::DivUIOp::create(b, safe, wb.index(slots)),
                            arith::RemUIOp::create(b, safe, wb.index(slots))});
    Value valid = arith::AndIOp::create(
        b, inRange, wb.inRange(expert, wb.i32(0), wb.i32(numExperts)));
    return {slot, wb.select(valid, expert, wb.i32(-1)), valid};
  };

  // 1. Per-chunk histograms.
  {
    gpu::GPUFuncOp kernel = plan.createKernel(
        builder, loc, "moe_route_count", {ids, blockOffsets},
        {chunks, PlanBuilder::constant(1), PlanBuilder::constant(1)},
        {kRouteThreads, 1, 1}, {workgroupMemRef({numExperts}, i32)});
    ImplicitLocOpBuilder b(loc, builder);
    WarpBuilder wb = makeWarpBuilder(b);
    Value counts = kernel.getWorkgroupAttributions()[0];
    Value numTokens = wb.toIndex(tokenCount(kernel));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    strided(wb, tid, wb.index(numExperts), kRouteThreads,
            [&](Value e) { wb.store(wb.i32(0), counts, e); });
    gpu::BarrierOp::create(b);
    Value slot, expert, valid;
    std::tie(slot, expert, valid) =
        loadSlot(wb, kernel.getArgument(0), numTokens);
    wb.ifThen(valid, [&] {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, wb.i32(1),
                                  counts, ValueRange{wb.toIndex(expert)});
    });
    gpu::BarrierOp::create(b);
    Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    strided(wb, tid, wb.index(numExperts), kRouteThreads, [&](Value e) {
      wb.store(wb.load(counts, e), kernel.getArgument(1), {chunk, e});
    });
  }

  // 2. One block: stable per-chunk offsets, padded expert offsets, block
  // experts, padding sentinels and the padded count.
  {
    gpu::GPUFuncOp kernel = plan.createKernel(
        builder, loc, "moe_route_scan",
        {blockOffsets, expertOffsets, sortedIds, expertIds, numPadded},
        {PlanBuilder::constant(1), PlanBuilder::constant(1),
         PlanBuilder::constant(1)},
        {kScanThreads, 1, 1}, {workgroupMemRef({kScanThreads}, i32)});
    ImplicitLocOpBuilder b(loc, builder);
    WarpBuilder wb = makeWarpBuilder(b);
    Value scan = kernel.getWorkgroupAttributions()[0];
    Value offsetsPerChunk = kernel.getArgument(0);
    Value numTokens = wb.toIndex(tokenCount(kernel));
    Value routedSlots = arith::MulIOp::create(b, numTokens, wb.index(slots));
    Value sentinel = wb.toI32(routedSlots);
    Value numChunks =
        arith::CeilDivUIOp::create(b, routedSlots, wb.index(kRouteThreads));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value isExpert =
        wb.cmpi(arith::CmpIPredicate::ult, tid, wb.index(numExperts));
    Value expert = wb.select(isExpert, tid, wb.index(0));
    // Exclusive prefix over chunks, in chunk order: slots keep their order.
    Value total = wb.loop(
        wb.index(0), wb.select(isExpert, numChunks, wb.index(0)), {wb.i32(0)},
        [&](Value chunk, ValueRange carried) -> SmallVector<Value> {
          Value count = wb.load(offsetsPerChunk, {chunk, expert});
          wb.store(carried[0], offsetsPerChunk, {chunk, expert});
          return {arith::AddIOp::create(b, carried[0], count)};
        })[0];
    Value blockRows = wb.i32(blockM);
    Value padded = arith::MulIOp::create(
        b, arith::CeilDivUIOp::create(b, total, blockRows), blockRows);
    // Inclusive scan of the padded counts over the block (Hillis-Steele).
    wb.store(padded, scan, tid);
    gpu::BarrierOp::create(b);
    for (int64_t distance = 1; distance < kScanThreads; distance *= 2) {
      Value hasLeft =
          wb.cmpi(arith::CmpIPredicate::uge, tid, wb.index(distance));
      Value left = wb.load(
          scan,
          wb.select(hasLeft, arith::SubIOp::create(b, tid, wb.index(distance)),
                    wb.index(0)));
      left = wb.select(hasLeft, left, wb.i32(0));
      gpu::BarrierOp::create(b);
      wb.store(arith::AddIOp::create(b, wb.load(scan, tid), left), scan, tid);
      gpu::BarrierOp::create(b);
    }
    Value offset = arith::SubIOp::create(b, wb.load(scan, tid), padded);
    Value totalPadded = wb.load(scan, wb.index(kScanThreads - 1));
    Value sortedBuffer = kernel.getArgument(2),
          expertBuffer = kernel.getArgument(3);
    wb.ifThen(isExpert, [&] {
      wb.store(offset, kernel.getArgument(1), expert);
      Value firstBlock = arith::DivUIOp::create(b, offset, blockRows);
      Value endBlock = arith::DivUIOp::create(
          b, arith::AddIOp::create(b, offset, padded), blockRows);
      wb.loop(wb.toIndex(firstBlock), wb.toIndex(endBlock), [&](Value block) {
        wb.store(wb.toI32(expert), expertBuffer, block);
      });
      wb.loop(wb.toIndex(arith::AddIOp::create(b, offset, total)),
              wb.toIndex(arith::AddIOp::create(b, offset, padded)),
              [&](Value row) { wb.store(sentinel, sortedBuffer, row); });
    });
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, tid, wb.index(0)),
              [&] { wb.store(totalPadded, kernel.getArgument(4), {}); });
    Value rowCapacity = arith::AddIOp::create(
        b, routedSlots, wb.index(numExperts * (blockM - 1)));
    strided(wb, arith::AddIOp::create(b, wb.toIndex(totalPadded), tid),
            rowCapacity, kScanThreads,
            [&](Value row) { wb.store(sentinel, sortedBuffer, row); });
    strided(wb,
            arith::AddIOp::create(
                b,
                wb.toIndex(arith::DivUIOp::create(b, totalPadded, blockRows)),
                tid),
            arith::CeilDivUIOp::create(b, rowCapacity, wb.index(blockM)),
            kScanThreads,
            [&](Value block) { wb.store(wb.i32(-1), expertBuffer, block); });
  }

  // 3. Stable placement: rank within the warp by match.any, across warps
  // through shared per-warp counts, across chunks by the scanned offsets.
  {
    gpu::GPUFuncOp kernel = plan.createKernel(
        builder, loc, "moe_route_place",
        {ids, blockOffsets, expertOffsets, sortedIds},
        {chunks, PlanBuilder::constant(1), PlanBuilder::constant(1)},
        {kRouteThreads, 1, 1},
        {workgroupMemRef({kRouteWarps, numExperts}, i32)});
    ImplicitLocOpBuilder b(loc, builder);
    WarpBuilder wb = makeWarpBuilder(b);
    Value warpCounts = kernel.getWorkgroupAttributions()[0];
    Value numTokens = wb.toIndex(tokenCount(kernel));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value warp = arith::DivUIOp::create(b, tid, wb.index(kWarpSize));
    Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    strided(wb, tid, wb.index(kRouteWarps * numExperts), kRouteThreads,
            [&](Value i) {
              wb.store(wb.i32(0), warpCounts,
                       {arith::DivUIOp::create(b, i, wb.index(numExperts)),
                        arith::RemUIOp::create(b, i, wb.index(numExperts))});
            });
    gpu::BarrierOp::create(b);
    Value slot, expert, valid;
    std::tie(slot, expert, valid) =
        loadSlot(wb, kernel.getArgument(0), numTokens);
    Value same = NVVM::MatchSyncOp::create(
        b, i32, wb.i32(-1), expert,
        NVVM::MatchSyncKindAttr::get(b.getContext(), NVVM::MatchSyncKind::any));
    Value below =
        arith::AndIOp::create(b, same, NVVM::LaneMaskLtOp::create(b, i32));
    Value rank = LLVM::CtPopOp::create(b, below);
    Value leader = wb.cmpi(arith::CmpIPredicate::eq, below, wb.i32(0));
    wb.ifThen(arith::AndIOp::create(b, valid, leader), [&] {
      wb.store(LLVM::CtPopOp::create(b, same), warpCounts,
               {warp, wb.toIndex(expert)});
    });
    gpu::BarrierOp::create(b);
    strided(wb, tid, wb.index(numExperts), kRouteThreads, [&](Value e) {
      Value start =
          arith::AddIOp::create(b, wb.load(kernel.getArgument(2), e),
                                wb.load(kernel.getArgument(1), {chunk, e}));
      wb.loop(wb.index(0), wb.index(kRouteWarps), {start},
              [&](Value w, ValueRange carried) -> SmallVector<Value> {
                Value count = wb.load(warpCounts, {w, e});
                wb.store(carried[0], warpCounts, {w, e});
                return {arith::AddIOp::create(b, carried[0], count)};
              });
    });
    gpu::BarrierOp::create(b);
    wb.ifThen(valid, [&] {
      Value row = arith::AddIOp::create(
          b, wb.load(warpCounts, {warp, wb.toIndex(expert)}), rank);
      wb.store(wb.toI32(slot), kernel.getArgument(3), wb.toIndex(row));
    });
  }
  return success();
}

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

constexpr int64_t kCombineThreads = 256;

/// One thread per 16 bytes of an output row: sum the token's slot rows.
void emitCombine(PlanBuilder &plan, OpBuilder &builder, CombineOp op) {
  OpBuilder::InsertionGuard guard(builder);
  auto rowsType = cast<RankedTensorType>(op.getRows().getType());
  int64_t slots = rowsType.getDimSize(1), hidden = rowsType.getDimSize(2);
  Type elementType = rowsType.getElementType();
  int64_t width = 16 / (elementType.getIntOrFloatBitWidth() / 8);
  while (hidden % width)
    width /= 2;
  int64_t chunksPerRow = hidden / width;
  // Rows start 16-byte aligned (the runtime checks the base) and every chunk
  // is a multiple of its own size into the row, so the vectors are aligned.
  llvm::Align alignment(width * elementType.getIntOrFloatBitWidth() / 8);
  bool weighted = static_cast<bool>(op.getWeights());

  SmallVector<KernelArg> args = {plan.use(op.getRows())};
  if (weighted)
    args.push_back(plan.use(op.getWeights()));
  args.push_back(plan.define(op.getOutput(), "combine_output",
                             {plan.tokens(), PlanBuilder::constant(hidden)}));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_combine", args,
      {PlanBuilder::ceilDiv(plan.affine(chunksPerRow, 0), kCombineThreads),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kCombineThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value rows = kernel.getArgument(0);
  Value weights = weighted ? kernel.getArgument(1) : Value();
  Value output = kernel.getArgument(weighted ? 2 : 1);
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value item = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kCombineThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value token = arith::DivUIOp::create(b, item, wb.index(chunksPerRow));
  Value column = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, item, wb.index(chunksPerRow)),
      wb.index(width));
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, token, numTokens), [&] {
    auto f32Vector = VectorType::get({width}, b.getF32Type());
    auto rowVector = VectorType::get({width}, elementType);
    Value zero =
        arith::ConstantOp::create(b, DenseElementsAttr::get(f32Vector, 0.0f));
    Value sum = wb.loop(
        wb.index(0), wb.index(slots), {zero},
        [&](Value s, ValueRange carried) -> SmallVector<Value> {
          Value row = vector::LoadOp::create(b, rowVector, rows,
                                             ValueRange{token, s, column},
                                             /*nontemporal=*/false, alignment);
          if (elementType != b.getF32Type())
            row = arith::ExtFOp::create(b, f32Vector, row);
          if (weights)
            row = arith::MulFOp::create(
                b, row,
                vector::BroadcastOp::create(b, f32Vector,
                                            wb.load(weights, {token, s})));
          return {arith::AddFOp::create(b, carried[0], row)};
        })[0];
    if (elementType != b.getF32Type())
      sum = arith::TruncFOp::create(b, rowVector, sum);
    vector::StoreOp::create(b, sum, output, ValueRange{token, column},
                            /*nontemporal=*/false, alignment);
  });
}

struct ConvertMoeToGPUPass
    : moe::impl::ConvertMoeToGPUBase<ConvertMoeToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> functions;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        functions.push_back(function);
    if (functions.size() != 1) {
      module.emitError() << "convert-moe-to-gpu: expected one layer function, "
                            "got "
                         << functions.size();
      return signalPassFailure();
    }
    if (tokensMax < 1 || numSMs < 1) {
      module.emitError()
          << "convert-moe-to-gpu: tokens-max and num-sms must be positive";
      return signalPassFailure();
    }
    func::FuncOp function = functions.front();
    OpBuilder builder(module.getContext());
    builder.setInsertionPointToEnd(module.getBody());
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    builder.getUnitAttr());
    auto target = NVVM::NVVMTargetAttr::get(
        module.getContext(), /*O=*/3, "nvptx64-nvidia-cuda", chip, features);
    auto kernels =
        gpu::GPUModuleOp::create(builder, function.getLoc(), kKernelModuleName,
                                 builder.getArrayAttr({target}));
    PlanBuilder plan(module, kernels, tokensMax, numSMs);
    for (BlockArgument argument : function.getArguments())
      plan.use(argument);
    WalkResult result = function.walk([&](Operation *op) {
      LogicalResult lowered =
          TypeSwitch<Operation *, LogicalResult>(op)
              .Case([&](GateOp gate) -> LogicalResult {
                return emitGate(plan, builder, gate);
              })
              .Case([&](RouteOp route) -> LogicalResult {
                return emitRoute(plan, builder, route);
              })
              .Case([&](CombineOp combine) -> LogicalResult {
                emitCombine(plan, builder, combine);
                return success();
              })
              .Case([&](TensorMapOp map) -> LogicalResult {
                plan.defineTensorMap(map);
                return success();
              })
              .Case([&](GroupedMatmulOp gemm) -> LogicalResult {
                return emitGroupedMatmul(plan, builder, gemm);
              })
              .Case([&](FusedMoeOp fused) -> LogicalResult {
                return fused.emitOpError()
                       << "must be decomposed first (moe-decompose)";
              })
              .Case([&](func::ReturnOp ret) -> LogicalResult {
                plan.markOutputs(ret);
                return success();
              })
              .Default([&](Operation *other) -> LogicalResult {
                if (isa<func::FuncOp>(other))
                  return success();
                return other->emitOpError()
                       << "is not part of a moe layer (convert-moe-to-gpu)";
              });
      return failed(lowered) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    plan.finish(builder);
  }
};

} // namespace
