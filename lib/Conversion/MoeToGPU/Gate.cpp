//===- Gate.cpp - moe.gate to a GPU kernel --------------------------------===//
//
// One warp per token: the lanes hold the token's experts in registers, score
// them (softmax over the warp, or sigmoid), mask the groups that lose, and
// pick top_k experts by warp-wide arg-max rounds on order-preserving keys, so
// that the result is bit-identical to the CPU path.
//
//===----------------------------------------------------------------------===//

#include "Lowerings.h"
#include "WarpBuilder.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

constexpr int64_t kGateWarpsPerBlock = 4;
constexpr int64_t kMaxExpertsPerLane = 32;

/// The experts of one token a lane holds: lane l holds experts l, l + 32,
/// ..., whether each exists, and its logit.
struct LaneExperts {
  SmallVector<Value> experts, expertsI32, valid, logits;
};

LaneExperts loadLaneExperts(WarpBuilder &wb, Value logits, Value token,
                            int64_t numExperts) {
  ImplicitLocOpBuilder &b = wb.b;
  Value trueValue = arith::ConstantIntOp::create(b, b.getI1Type(), 1);
  LaneExperts lane;
  int64_t perLane = llvm::divideCeil(numExperts, kWarpSize);
  for (int64_t j = 0; j < perLane; ++j) {
    Value expert = arith::AddIOp::create(b, wb.lane, wb.index(j * kWarpSize));
    bool allValid = (j + 1) * kWarpSize <= numExperts;
    Value isValid = allValid ? trueValue
                             : wb.cmpi(arith::CmpIPredicate::ult, expert,
                                       wb.index(numExperts));
    Value safe = allValid ? expert : wb.select(isValid, expert, wb.index(0));
    lane.experts.push_back(expert);
    lane.expertsI32.push_back(wb.toI32(expert));
    lane.valid.push_back(isValid);
    lane.logits.push_back(wb.loadF32(logits, {token, safe}));
  }
  return lane;
}

/// The scores of the lane's experts: sigmoid of each logit, or the softmax
/// over the token's valid experts (max and sum reduced over the warp).
SmallVector<Value> emitScores(WarpBuilder &wb, Scoring scoring,
                              const LaneExperts &lane) {
  ImplicitLocOpBuilder &b = wb.b;
  Location loc = b.getLoc();
  int64_t perLane = lane.logits.size();
  SmallVector<Value> scores(perLane);
  if (scoring == Scoring::sigmoid) {
    for (int64_t j = 0; j < perLane; ++j)
      scores[j] = emitRoutingSigmoid(b, loc, lane.logits[j]);
    return scores;
  }
  // RoutingMath.h's softmax, the lane's experts in increasing order into its
  // partial sum (the CPU path's partial sum e % 32).
  Value negInf = wb.f32(-std::numeric_limits<float>::infinity());
  Value max = negInf;
  for (int64_t j = 0; j < perLane; ++j)
    max = arith::MaximumFOp::create(
        b, max,
        wb.select(lane.valid[j], emitSoftmaxMaxOperand(b, loc, lane.logits[j]),
                  negInf));
  max = wb.allReduce(max, [&](Value l, Value r) {
    return arith::MaximumFOp::create(b, l, r).getResult();
  });
  Value partial = wb.f32(0.0);
  SmallVector<Value> p(perLane);
  for (int64_t j = 0; j < perLane; ++j) {
    p[j] = wb.select(lane.valid[j],
                     emitSoftmaxNumerator(b, loc, lane.logits[j], max),
                     wb.f32(0.0));
    partial =
        arith::AddFOp::create(b, partial, emitSoftmaxSummand(b, loc, p[j]));
  }
  Value sum = wb.allReduce(partial, [&](Value l, Value r) {
    return arith::AddFOp::create(b, l, r).getResult();
  });
  for (int64_t j = 0; j < perLane; ++j)
    scores[j] = arith::DivFOp::create(b, p[j], sum);
  return scores;
}

/// Whether each of the lane's experts stays eligible after group selection:
/// a group's score is the sum of its two largest selection scores, and the
/// experts of the topk_groups best groups stay.
SmallVector<Value> emitGroupMask(WarpBuilder &wb, RouterAttr router,
                                 int64_t numExperts, const LaneExperts &lane,
                                 ArrayRef<Value> keys) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t numGroups = router.getNumGroups();
  int64_t groupSize = numExperts / numGroups;
  int64_t perLane = keys.size();
  Value noKey = wb.i32(0);
  // All groups reduce at once, on keys alone: the multiset top-2 needs no
  // expert ids.
  bool staticGroups = groupSize % kWarpSize == 0;
  SmallVector<Value> groupOf;
  for (int64_t j = 0; j < perLane; ++j)
    groupOf.push_back(
        staticGroups
            ? wb.i32(j * kWarpSize / groupSize)
            : arith::DivUIOp::create(b, lane.expertsI32[j], wb.i32(groupSize))
                  .getResult());
  SmallVector<Value> groupScores;
  for (int64_t g = 0; g < numGroups; ++g) {
    Value first = noKey, second = noKey;
    for (int64_t j = 0; j < perLane; ++j) {
      if (staticGroups && j * kWarpSize / groupSize != g)
        continue;
      Value member = lane.valid[j];
      if (!staticGroups)
        member = arith::AndIOp::create(
            b, member,
            wb.cmpi(arith::CmpIPredicate::eq, groupOf[j], wb.i32(g)));
      Value key = wb.select(member, keys[j], noKey);
      second = arith::MaxUIOp::create(b, second,
                                      arith::MinUIOp::create(b, first, key));
      first = arith::MaxUIOp::create(b, first, key);
    }
    auto [top, runnerUp] = wb.warpTopTwo(first, second);
    groupScores.push_back(
        arith::AddFOp::create(b, wb.scoreOfKey(top), wb.scoreOfKey(runnerUp)));
  }
  // Keep the topk_groups best groups: warp-uniform, so no shuffles.
  SmallVector<Value> kept(numGroups,
                          arith::ConstantIntOp::create(b, b.getI1Type(), 0));
  SmallVector<Value> groupKeys;
  for (Value score : groupScores)
    groupKeys.push_back(wb.orderedKey(score));
  for (int64_t round = 0; round < router.getTopkGroups(); ++round) {
    WarpBuilder::Candidate best = wb.none();
    for (int64_t g = 0; g < numGroups; ++g)
      best =
          wb.better(best, {wb.select(kept[g], noKey, groupKeys[g]),
                           wb.select(kept[g], wb.i32(INT32_MAX), wb.i32(g))});
    for (int64_t g = 0; g < numGroups; ++g)
      kept[g] = arith::OrIOp::create(
          b, kept[g],
          wb.cmpi(arith::CmpIPredicate::eq, best.expert, wb.i32(g)));
  }
  SmallVector<Value> eligible;
  for (int64_t j = 0; j < perLane; ++j) {
    Value keptGroup = arith::ConstantIntOp::create(b, b.getI1Type(), 0);
    if (staticGroups) {
      keptGroup = kept[j * kWarpSize / groupSize];
    } else {
      for (int64_t g = 0; g < numGroups; ++g)
        keptGroup =
            wb.select(wb.cmpi(arith::CmpIPredicate::eq, groupOf[j], wb.i32(g)),
                      kept[g], keptGroup);
    }
    eligible.push_back(arith::AndIOp::create(b, lane.valid[j], keptGroup));
  }
  return eligible;
}

/// The experts chosen for the token's routed slots, their weights (NaN
/// scores weigh 0) and the sum of the weights.
struct Selection {
  SmallVector<Value> ids, weights;
  Value sum;
};

/// top_k rounds of arg-max over the eligible experts; the winner leaves the
/// running, and its unbiased score comes from the lane that holds it (or
/// from its key, when selection and score agree: no bias).
Selection selectTopK(WarpBuilder &wb, int64_t topK, const LaneExperts &lane,
                     ArrayRef<Value> keys, ArrayRef<Value> eligible,
                     ArrayRef<Value> scores, bool hasBias) {
  ImplicitLocOpBuilder &b = wb.b;
  Value noKey = wb.i32(0);
  SmallVector<WarpBuilder::Candidate> candidates;
  for (auto [j, key] : llvm::enumerate(keys))
    candidates.push_back(
        {wb.select(eligible[j], key, noKey),
         wb.select(eligible[j], lane.expertsI32[j], wb.i32(INT32_MAX))});
  Selection selection{{}, {}, wb.f32(0.0)};
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
    if (hasBias) {
      Value slotInLane = arith::DivUIOp::create(b, expert, wb.i32(kWarpSize));
      Value mine = wb.f32(0.0);
      for (auto [j, laneScore] : llvm::enumerate(scores))
        mine =
            wb.select(wb.cmpi(arith::CmpIPredicate::eq, slotInLane, wb.i32(j)),
                      laneScore, mine);
      score = wb.shuffleFrom(
          mine, arith::RemUIOp::create(b, expert, wb.i32(kWarpSize)));
    }
    for (WarpBuilder::Candidate &candidate : candidates) {
      Value won = wb.cmpi(arith::CmpIPredicate::eq, candidate.expert, expert);
      candidate = {wb.select(won, noKey, candidate.key),
                   wb.select(won, wb.i32(INT32_MAX), candidate.expert)};
    }
    Value weight = wb.select(wb.isNaN(score), wb.f32(0.0), score);
    selection.sum = arith::AddFOp::create(b, selection.sum, weight);
    selection.ids.push_back(expert);
    selection.weights.push_back(weight);
  }
  return selection;
}

/// The token's slots from lane 0: the routed ones renormalized and scaled
/// as the router says, then the shared experts with weight 1.
void storeSlots(WarpBuilder &wb, RouterAttr router, int64_t numExperts,
                Selection selection, Value token, Value weights, Value ids) {
  ImplicitLocOpBuilder &b = wb.b;
  double scale = router.getRoutedScalingFactor().convertToDouble();
  Value denominator =
      router.getRenormalize()
          ? arith::AddFOp::create(b, selection.sum, wb.f32(1e-20)).getResult()
          : Value();
  for (Value &weight : selection.weights) {
    if (denominator)
      weight = arith::DivFOp::create(b, weight, denominator);
    if (scale != 1.0)
      weight = arith::MulFOp::create(b, weight, wb.f32(scale));
  }
  for (int64_t i = 0; i < router.getNumSharedExperts(); ++i) {
    selection.ids.push_back(wb.i32(numExperts + i));
    selection.weights.push_back(wb.f32(1.0));
  }
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)), [&] {
    for (int64_t s = 0; s < router.getNumSlots(); ++s) {
      wb.store(selection.ids[s], ids, {token, wb.index(s)});
      wb.store(selection.weights[s], weights, {token, wb.index(s)});
    }
  });
}

} // namespace

LogicalResult mlir::moe::detail::emitGate(PlanBuilder &plan, OpBuilder &builder,
                                          GateOp op) {
  OpBuilder::InsertionGuard guard(builder);
  RouterAttr router = op.getRouter();
  auto logitsType = cast<RankedTensorType>(op.getLogits().getType());
  int64_t numExperts = logitsType.getDimSize(1);
  // A lane keeps its experts in registers: 32 per lane at most.
  if (llvm::divideCeil(numExperts, kWarpSize) > kMaxExpertsPerLane)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kMaxExpertsPerLane * kWarpSize << " experts";
  SizeExpr t = plan.tokens();
  SizeExpr slots = PlanBuilder::constant(router.getNumSlots());

  KernelArgList args;
  unsigned logitsArg = args.add(plan.use(op.getLogits()));
  std::optional<unsigned> biasArg =
      args.addIf(static_cast<bool>(op.getCorrectionBias()),
                 [&] { return plan.use(op.getCorrectionBias()); });
  unsigned weightsArg =
      args.add(plan.define(op.getWeights(), "gate_weights", {t, slots}));
  unsigned idsArg = args.add(plan.define(op.getIds(), "gate_ids", {t, slots}));
  gpu::GPUFuncOp kernel =
      plan.createKernel(builder, op.getLoc(), "moe_gate", args.get(),
                        {PlanBuilder::ceilDiv(t, kGateWarpsPerBlock),
                         PlanBuilder::constant(1), PlanBuilder::constant(1)},
                        {kGateWarpsPerBlock * kWarpSize, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value bias = kernelArgument(kernel, biasArg);
  Value numTokens = wb.toIndex(tokenCount(kernel));

  Value warp = arith::DivUIOp::create(
      b, gpu::ThreadIdOp::create(b, gpu::Dimension::x), wb.index(kWarpSize));
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kGateWarpsPerBlock)),
      warp);
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, token, numTokens), [&] {
    LaneExperts lane =
        loadLaneExperts(wb, kernel.getArgument(logitsArg), token, numExperts);
    SmallVector<Value> scores = emitScores(wb, router.getScoring(), lane);
    // Selection ranks scores + bias (the bias selects, it never weighs).
    SmallVector<Value> selection(scores);
    if (bias)
      for (auto [j, score] : llvm::enumerate(scores))
        selection[j] = arith::AddFOp::create(
            b, score,
            wb.load(bias,
                    wb.select(lane.valid[j], lane.experts[j], wb.index(0))));
    SmallVector<Value> keys;
    for (Value value : selection)
      keys.push_back(wb.orderedKey(value));
    SmallVector<Value> eligible =
        router.getNumGroups() > 1
            ? emitGroupMask(wb, router, numExperts, lane, keys)
            : lane.valid;
    storeSlots(wb, router, numExperts,
               selectTopK(wb, router.getTopK(), lane, keys, eligible, scores,
                          static_cast<bool>(bias)),
               token, kernel.getArgument(weightsArg),
               kernel.getArgument(idsArg));
  });
  return success();
}
