//===- Gate.cpp - moe.gate to a GPU kernel --------------------------------===//
//
// One warp per token: the lanes hold the token's experts in registers, score
// them (softmax over the warp, or sigmoid), mask the groups that lose, and
// pick top_k experts by warp-wide arg-max rounds on order-preserving keys, so
// that the result is bit-identical to the CPU path. Each lane ranks its best
// few experts once, and a round compares the lanes' heads (redux.sync), so
// the cost of a round does not grow with the experts a lane holds.
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

/// The best of a lane's `candidates`, listed in increasing expert order: a
/// strictly larger key decides, so ties go to the lower expert.
WarpBuilder::Candidate laneBest(WarpBuilder &wb,
                                ArrayRef<WarpBuilder::Candidate> candidates) {
  WarpBuilder::Candidate best = candidates.front();
  for (const WarpBuilder::Candidate &candidate : drop_begin(candidates)) {
    Value larger = wb.cmpi(arith::CmpIPredicate::ugt, candidate.key, best.key);
    best = wb.selectCandidate(larger, candidate, best);
  }
  return best;
}

/// The topk_groups best of the token's groups, given each group's two
/// largest keys (warp-uniform), as a bit mask per 32 groups: lane l scores
/// groups l and l + 32 (the sum of the two keys' scores: once a lane, not
/// once a group in every lane), and each round's warp-wide arg-max (ties to
/// the lower group) keeps one group.
SmallVector<Value> emitKeptGroups(WarpBuilder &wb, int64_t topkGroups,
                                  ArrayRef<std::pair<Value, Value>> topTwo) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t numGroups = topTwo.size();
  SmallVector<WarpBuilder::Candidate> held;
  for (int64_t first = 0; first < numGroups; first += kWarpSize) {
    Value top = wb.i32(0), runnerUp = wb.i32(0), group = wb.i32(INT32_MAX);
    for (int64_t g = first; g < std::min(first + kWarpSize, numGroups); ++g) {
      Value mine =
          wb.cmpi(arith::CmpIPredicate::eq, wb.laneI32, wb.i32(g - first));
      top = wb.select(mine, topTwo[g].first, top);
      runnerUp = wb.select(mine, topTwo[g].second, runnerUp);
      group = wb.select(mine, wb.i32(g), group);
    }
    Value key = wb.orderedKey(
        arith::AddFOp::create(b, wb.scoreOfKey(top), wb.scoreOfKey(runnerUp)));
    Value isGroup = wb.cmpi(arith::CmpIPredicate::ult, wb.laneI32,
                            wb.i32(std::min(kWarpSize, numGroups - first)));
    held.push_back({wb.select(isGroup, key, wb.i32(0)), group});
  }
  SmallVector<Value> kept(held.size(), wb.i32(0));
  for (int64_t round = 0; round < topkGroups; ++round) {
    WarpBuilder::Candidate best = wb.warpBest(laneBest(wb, held));
    for (auto [group, keptGroup] : llvm::zip(held, kept)) {
      Value won = wb.cmpi(arith::CmpIPredicate::eq, group.expert, best.expert);
      keptGroup = wb.select(won, wb.i32(1), keptGroup);
      group = wb.selectCandidate(won, wb.none(), group);
    }
  }
  SmallVector<Value> masks;
  for (Value keptGroup : kept)
    masks.push_back(wb.redux(NVVM::ReduxKind::OR,
                             arith::ShLIOp::create(b, keptGroup, wb.laneI32)));
  return masks;
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
  SmallVector<std::pair<Value, Value>> topTwo;
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
    topTwo.push_back(wb.warpTopTwo(first, second));
  }
  SmallVector<Value> masks = emitKeptGroups(wb, router.getTopkGroups(), topTwo);
  SmallVector<Value> eligible;
  for (int64_t j = 0; j < perLane; ++j) {
    Value mask = masks.front();
    Value bit = groupOf[j];
    if (masks.size() > 1) {
      Value high = wb.cmpi(arith::CmpIPredicate::uge, bit, wb.i32(kWarpSize));
      mask = wb.select(high, masks[1], mask);
      bit = arith::AndIOp::create(b, bit, wb.i32(kWarpSize - 1));
    }
    Value keptGroup =
        wb.cmpi(arith::CmpIPredicate::ne,
                arith::AndIOp::create(b, arith::ShRUIOp::create(b, mask, bit),
                                      wb.i32(1)),
                wb.i32(0));
    eligible.push_back(arith::AndIOp::create(b, lane.valid[j], keptGroup));
  }
  return eligible;
}

/// Each lane's best few remaining candidates, best first, with their
/// unbiased scores when the router has a bias (the selection key is then not
/// the score); none-padded. Rounds take the warp's best head, so a lane
/// rescans its experts only when it has given up all of them (rare: three of
/// a token's top_k in one lane of 32).
struct LaneRanking {
  SmallVector<WarpBuilder::Candidate> entries;
  SmallVector<Value> scores;

  /// Keys and experts, then scores: what an scf.if carries.
  SmallVector<Value> values() const {
    SmallVector<Value> values;
    for (const WarpBuilder::Candidate &entry : entries)
      llvm::append_range(values, ArrayRef<Value>{entry.key, entry.expert});
    llvm::append_range(values, scores);
    return values;
  }
  static LaneRanking fromValues(ValueRange values, int64_t size) {
    LaneRanking ranking;
    for (int64_t p = 0; p < size; ++p)
      ranking.entries.push_back({values[2 * p], values[2 * p + 1]});
    llvm::append_range(ranking.scores, values.drop_front(2 * size));
    return ranking;
  }
};

constexpr int64_t kLaneRankingSize = 3;

/// The lane's `size` best `candidates` (in increasing expert order, so a
/// strictly larger key decides), by insertion.
LaneRanking rankLane(WarpBuilder &wb, int64_t size,
                     ArrayRef<WarpBuilder::Candidate> candidates,
                     ArrayRef<Value> scores) {
  LaneRanking ranking{
      SmallVector<WarpBuilder::Candidate>(size, wb.none()),
      SmallVector<Value>(scores.empty() ? 0 : size, wb.f32(0.0))};
  for (auto [i, candidate] : llvm::enumerate(candidates)) {
    // Past the i-th position the ranking still holds none. The candidate
    // goes where its key first beats the entry, which moves down one.
    int64_t filled = std::min<int64_t>(i + 1, size);
    SmallVector<Value> beats;
    for (int64_t p = 0; p < filled; ++p)
      beats.push_back(wb.cmpi(arith::CmpIPredicate::ugt, candidate.key,
                              ranking.entries[p].key));
    LaneRanking old = ranking;
    auto insert = [&](int64_t p, Value stay, Value incoming, Value above) {
      Value value = wb.select(beats[p], incoming, stay);
      return p == 0 ? value : wb.select(beats[p - 1], above, value);
    };
    for (int64_t p = 0; p < filled; ++p) {
      int64_t up = std::max<int64_t>(p - 1, 0);
      ranking.entries[p] = {
          insert(p, old.entries[p].key, candidate.key, old.entries[up].key),
          insert(p, old.entries[p].expert, candidate.expert,
                 old.entries[up].expert)};
      if (!scores.empty())
        ranking.scores[p] = insert(p, old.scores[p], scores[i], old.scores[up]);
    }
  }
  return ranking;
}

/// The `candidates` less those already `chosen` (as none).
SmallVector<WarpBuilder::Candidate>
notChosen(WarpBuilder &wb, ArrayRef<WarpBuilder::Candidate> candidates,
          ArrayRef<Value> chosen) {
  SmallVector<WarpBuilder::Candidate> left;
  for (const WarpBuilder::Candidate &candidate : candidates) {
    Value taken =
        wb.cmpi(arith::CmpIPredicate::eq, candidate.expert, chosen.front());
    for (Value expert : chosen.drop_front())
      taken = arith::OrIOp::create(
          wb.b, taken,
          wb.cmpi(arith::CmpIPredicate::eq, candidate.expert, expert));
    left.push_back(wb.selectCandidate(taken, wb.none(), candidate));
  }
  return left;
}

/// The experts chosen for the token's routed slots, their weights (NaN
/// scores weigh 0) and the sum of the weights.
struct Selection {
  SmallVector<Value> ids, weights;
  Value sum;
};

/// top_k rounds of arg-max over the heads of the lanes' rankings: the winner
/// leaves its lane's ranking, and its unbiased score comes from that lane
/// (or from its key, when selection and score agree: no bias). A lane that
/// has given up its whole ranking meets the marker behind it; the lanes then
/// rank the experts not yet chosen again.
Selection selectTopK(WarpBuilder &wb, int64_t topK,
                     ArrayRef<WarpBuilder::Candidate> candidates,
                     ArrayRef<Value> scores) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t perLane = candidates.size();
  int64_t size = std::min({topK, perLane, kLaneRankingSize});
  bool mayRerank = size < perLane;
  // Below every candidate, like none, but told apart from it: a ranking
  // padded with none ran out of eligible experts, not of places.
  WarpBuilder::Candidate marker{wb.i32(0), wb.i32(INT32_MAX - 1)};
  LaneRanking ranking = rankLane(wb, size, candidates, scores);
  Selection selection{{}, {}, wb.f32(0.0)};
  for (int64_t s = 0; s < topK; ++s) {
    WarpBuilder::Candidate head = ranking.entries.front();
    WarpBuilder::Candidate best = wb.warpBest(head);
    Value score =
        scores.empty()
            ? wb.scoreOfKey(best.key)
            : wb.shuffleFrom(
                  ranking.scores.front(),
                  arith::AndIOp::create(b, best.expert, wb.i32(kWarpSize - 1)));
    Value weight = wb.select(wb.isNaN(score), wb.f32(0.0), score);
    selection.sum = arith::AddFOp::create(b, selection.sum, weight);
    selection.ids.push_back(best.expert);
    selection.weights.push_back(weight);
    if (s + 1 == topK)
      break;
    Value won = wb.cmpi(arith::CmpIPredicate::eq, head.expert, best.expert);
    for (int64_t p = 0; p < size; ++p) {
      WarpBuilder::Candidate next = p + 1 < size ? ranking.entries[p + 1]
                                    : mayRerank  ? marker
                                                 : wb.none();
      ranking.entries[p] = wb.selectCandidate(won, next, ranking.entries[p]);
      if (!scores.empty() && p + 1 < size)
        ranking.scores[p] =
            wb.select(won, ranking.scores[p + 1], ranking.scores[p]);
    }
    if (!mayRerank || s + 1 < size)
      continue;
    Value spent =
        wb.any(wb.cmpi(arith::CmpIPredicate::eq, ranking.entries.front().expert,
                       marker.expert));
    ranking = LaneRanking::fromValues(
        wb.ifThenOr(spent, ranking.values(),
                    [&] {
                      return rankLane(wb, size,
                                      notChosen(wb, candidates, selection.ids),
                                      scores)
                          .values();
                    }),
        size);
  }
  return selection;
}

/// The token's slots, lane l storing slots l, l + 32, ...: the routed ones
/// renormalized and scaled as the router says (one division a lane, where
/// lane 0 storing all would divide top_k times), then the shared experts
/// with weight 1.
void storeSlots(WarpBuilder &wb, RouterAttr router, int64_t numExperts,
                Selection selection, Value token, Value weights, Value ids) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t topK = router.getTopK(), numSlots = router.getNumSlots();
  for (int64_t i = 0; i < router.getNumSharedExperts(); ++i) {
    selection.ids.push_back(wb.i32(numExperts + i));
    selection.weights.push_back(wb.f32(1.0));
  }
  double scale = router.getRoutedScalingFactor().convertToDouble();
  for (int64_t first = 0; first < numSlots; first += kWarpSize) {
    Value id = wb.i32(0), weight = wb.f32(0.0);
    for (int64_t s = first; s < std::min(first + kWarpSize, numSlots); ++s) {
      Value mine =
          wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(s - first));
      id = wb.select(mine, selection.ids[s], id);
      weight = wb.select(mine, selection.weights[s], weight);
    }
    Value slot = arith::AddIOp::create(b, wb.lane, wb.index(first));
    Value routedWeight = weight;
    if (router.getRenormalize())
      routedWeight = arith::DivFOp::create(
          b, routedWeight,
          arith::AddFOp::create(b, selection.sum, wb.f32(1e-20)));
    if (scale != 1.0)
      routedWeight = arith::MulFOp::create(b, routedWeight, wb.f32(scale));
    weight = wb.select(wb.cmpi(arith::CmpIPredicate::ult, slot, wb.index(topK)),
                       routedWeight, weight);
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, slot, wb.index(numSlots)),
              [&] {
                wb.store(id, ids, {token, slot});
                wb.store(weight, weights, {token, slot});
              });
  }
}

} // namespace

std::pair<unsigned, unsigned>
mlir::moe::detail::defineGateOutputs(PlanBuilder &plan, GateOp op) {
  SizeExpr t = plan.tokens();
  SizeExpr slots = PlanBuilder::constant(op.getRouter().getNumSlots());
  return {plan.define(op.getWeights(), "gate_weights", {t, slots}),
          plan.define(op.getIds(), "gate_ids", {t, slots})};
}

GateArgs mlir::moe::detail::addGateArgs(PlanBuilder &plan, KernelArgList &args,
                                        GateOp op) {
  GateArgs gate;
  gate.logits = args.add(plan.use(op.getLogits()));
  gate.bias = args.addIf(static_cast<bool>(op.getCorrectionBias()),
                         [&] { return plan.use(op.getCorrectionBias()); });
  auto [weights, ids] = defineGateOutputs(plan, op);
  gate.weights = args.add(weights);
  gate.ids = args.add(ids);
  return gate;
}

void mlir::moe::detail::emitGateToken(ImplicitLocOpBuilder &b, GateOp op,
                                      gpu::GPUFuncOp kernel,
                                      const GateArgs &args, Value token) {
  RouterAttr router = op.getRouter();
  int64_t numExperts =
      cast<RankedTensorType>(op.getLogits().getType()).getDimSize(1);
  WarpBuilder wb = makeWarpBuilder(b);
  Value bias = kernelArgument(kernel, args.bias);
  LaneExperts lane =
      loadLaneExperts(wb, kernel.getArgument(args.logits), token, numExperts);
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
  SmallVector<WarpBuilder::Candidate> candidates;
  for (auto [j, key] : llvm::enumerate(keys))
    candidates.push_back(
        wb.selectCandidate(eligible[j], {key, lane.expertsI32[j]}, wb.none()));
  storeSlots(wb, router, numExperts,
             selectTopK(wb, router.getTopK(), candidates,
                        bias ? ArrayRef<Value>(scores) : ArrayRef<Value>()),
             token, kernel.getArgument(args.weights),
             kernel.getArgument(args.ids));
}

LogicalResult mlir::moe::detail::emitGate(PlanBuilder &plan, OpBuilder &builder,
                                          GateOp op) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t numExperts =
      cast<RankedTensorType>(op.getLogits().getType()).getDimSize(1);
  // A lane keeps its experts in registers: 32 per lane at most.
  if (llvm::divideCeil(numExperts, kWarpSize) > kMaxExpertsPerLane)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kMaxExpertsPerLane * kWarpSize << " experts";
  KernelArgList args;
  GateArgs gate = addGateArgs(plan, args, op);
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_gate", args.get(),
      {PlanBuilder::ceilDiv(plan.tokens(), kGateWarpsPerBlock),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kGateWarpsPerBlock * kWarpSize, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder lb{b};
  Value warp = arith::DivUIOp::create(
      b, gpu::ThreadIdOp::create(b, gpu::Dimension::x), lb.index(kWarpSize));
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            lb.index(kGateWarpsPerBlock)),
      warp);
  lb.ifThen(
      lb.cmpi(arith::CmpIPredicate::ult, token, lb.toIndex(tokenCount(kernel))),
      [&] { emitGateToken(b, op, kernel, gate, token); });
  return success();
}
