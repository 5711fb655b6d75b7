//===- ExpertParallel.cpp - An expert-parallel layer into its phases ------===//

#include "ExpertGemms.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/MathExtras.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_MOEEXPERTPARALLEL
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The exchange buffers of one expert-parallel layer, all ranks' ([W, ...]):
/// the receive buffers of moe.ep_dispatch, the return buffer of
/// moe.ep_combine and the completion flags of either exchange ([W, W]); and
/// the status of a rank's waits, a buffer of its own.
struct ExchangeTypes {
  RankedTensorType rows, weights, slots, counts, returned, flags, status;

  static ExchangeTypes of(FusedMoeOp op) {
    ExpertParallelAttr parallel = op.getExpertParallelAttr();
    auto hidden = cast<RankedTensorType>(op.getHiddenStates().getType());
    int64_t world = parallel.getWorld();
    int64_t local = cast<RankedTensorType>(op.getW13().getType()).getDimSize(0);
    int64_t tokens = hidden.getDimSize(0), hiddenSize = hidden.getDimSize(1);
    // A source sends an expert at most one row per token: C = T.
    int64_t rows = local * world * tokens;
    Type element = hidden.getElementType();
    Builder b(op.getContext());
    return {
        RankedTensorType::get({world, rows, hiddenSize}, element),
        RankedTensorType::get({world, rows}, b.getF32Type()),
        RankedTensorType::get({world, rows}, b.getI32Type()),
        RankedTensorType::get({world, local, world}, b.getI32Type()),
        RankedTensorType::get(
            {world, tokens, op.getRouter().getNumSlots(), hiddenSize}, element),
        RankedTensorType::get({world, world}, b.getI32Type()),
        RankedTensorType::get({2}, b.getI32Type())};
  }

  SmallVector<Type> receive() const { return {rows, weights, slots, counts}; }
};

/// Rank `rank`'s part [d1, ...] of `buffer`, all ranks' [W, d1, ...].
Value rankPart(OpBuilder &b, Location loc, Value buffer, int64_t rank) {
  auto type = cast<RankedTensorType>(buffer.getType());
  int64_t dims = type.getRank();
  SmallVector<OpFoldResult> offsets(dims, b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes, strides(dims, b.getIndexAttr(1));
  offsets[0] = b.getIndexAttr(rank);
  for (int64_t size : type.getShape())
    sizes.push_back(b.getIndexAttr(size));
  sizes[0] = b.getIndexAttr(1);
  auto partType = RankedTensorType::get(type.getShape().drop_front(),
                                        type.getElementType());
  return tensor::ExtractSliceOp::create(b, loc, partType, buffer, offsets,
                                        sizes, strides);
}

/// Builds one phase of `layer` after `layer`'s function: a function named
/// `name` of the layer's `operands` (mapped to its first arguments in
/// `mapping`), of the exchange buffers `exchangeTypes` (marked
/// `moe.exchange`, so that a GPU rank holds one slice of each) and of the
/// rank's own buffers `ownTypes`, whose body `build` fills from those and
/// returns.
func::FuncOp
buildPhase(OpBuilder &b, FusedMoeOp layer, StringRef name, ValueRange operands,
           ArrayRef<Type> exchangeTypes, ArrayRef<Type> ownTypes,
           function_ref<SmallVector<Value>(IRMapping &, ValueRange)> build) {
  Location loc = layer.getLoc();
  SmallVector<Type> argTypes(operands.getTypes());
  argTypes.append(exchangeTypes.begin(), exchangeTypes.end());
  argTypes.append(ownTypes.begin(), ownTypes.end());
  auto function =
      func::FuncOp::create(b, loc, name, b.getFunctionType(argTypes, {}));
  auto *dialect = b.getContext()->getLoadedDialect<MoeDialect>();
  for (unsigned index = 0; index < exchangeTypes.size(); ++index)
    function.setArgAttr(operands.size() + index,
                        dialect->getExchangeAttrHelper().getName(),
                        layer.getExpertParallelAttr());
  Block *entry = function.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  IRMapping mapping;
  mapping.map(operands, entry->getArguments().take_front(operands.size()));
  SmallVector<Value> results =
      build(mapping, entry->getArguments().drop_front(operands.size()));
  func::ReturnOp::create(b, loc, results);
  function.setFunctionType(
      b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  return function;
}

/// The wait of `layer`'s `phase` (EpWaitOp::kExpertsPhase or kCombinePhase)
/// on `flags`, recorded in `status`, before the ops that read `guarded`.
EpWaitOp buildWait(OpBuilder &b, FusedMoeOp layer, int64_t phase, Value flags,
                   Value status, ValueRange guarded) {
  return EpWaitOp::create(b, layer.getLoc(), status.getType(),
                          guarded.getTypes(), flags, status, guarded,
                          layer.getExpertParallelAttr(), phase);
}

/// The signal on `flags` that the stores of the phase so far are done.
Value buildSignal(OpBuilder &b, FusedMoeOp layer, Value flags) {
  return EpSignalOp::create(b, layer.getLoc(), flags.getType(), flags,
                            layer.getExpertParallelAttr());
}

/// Phase 1: the gate over all experts, and each routed slot's row sent to
/// its expert's rank.
func::FuncOp buildDispatch(OpBuilder &b, FusedMoeOp layer, StringRef name,
                           const ExchangeTypes &types) {
  SmallVector<Value> operands = {layer.getHiddenStates(),
                                 layer.getRouterLogits()};
  if (Value bias = layer.getCorrectionBias())
    operands.push_back(bias);
  SmallVector<Type> buffers = types.receive();
  buffers.push_back(types.flags);
  return buildPhase(
      b, layer, name, operands, buffers, /*ownTypes=*/{},
      [&](IRMapping &mapping, ValueRange args) -> SmallVector<Value> {
        Location loc = layer.getLoc();
        RouterAttr router = layer.getRouter();
        auto slotType = [&](Type element) {
          return RankedTensorType::get(
              {types.returned.getDimSize(1), router.getNumSlots()}, element);
        };
        auto gate = GateOp::create(
            b, loc, slotType(b.getF32Type()), slotType(b.getI32Type()),
            mapping.lookup(layer.getRouterLogits()),
            mapping.lookupOrNull(layer.getCorrectionBias()), router);
        auto logitsType =
            cast<RankedTensorType>(layer.getRouterLogits().getType());
        auto dispatch = EpDispatchOp::create(
            b, loc, TypeRange(types.receive()),
            mapping.lookup(layer.getHiddenStates()), gate.getIds(),
            gate.getWeights(), args[0], args[1], args[2], args[3],
            logitsType.getDimSize(1), layer.getExpertParallelAttr());
        Value flags = args[4];
        SmallVector<Value> results = dispatch.getResults();
        results.push_back(buildSignal(b, layer, flags));
        return results;
      });
}

/// Phase 2: once every rank's dispatch arrived, the local experts over the
/// rank's received rows, routed in blocks of `blockM` rows, and each
/// weighted output row returned to its token's rank, which is then told.
func::FuncOp buildExperts(OpBuilder &b, FusedMoeOp layer, StringRef name,
                          const ExchangeTypes &types, int64_t blockM) {
  ExpertMlp mlp = ExpertMlp::of(layer);
  SmallVector<Type> buffers = types.receive();
  // The return buffer, then the dispatch's flags and the combine's.
  buffers.append({types.returned, types.flags, types.flags});
  return buildPhase(
      b, layer, name, mlp.getValues(), buffers, {types.status},
      [&](IRMapping &mapping, ValueRange args) -> SmallVector<Value> {
        Location loc = layer.getLoc();
        int64_t rank = layer.getExpertParallelAttr().getRank();
        Value returnBuffer = args[4], dispatchFlags = args[5],
              combineFlags = args[6], status = args[7];
        EpWaitOp wait = buildWait(b, layer, EpWaitOp::kExpertsPhase,
                                  dispatchFlags, status, args.take_front(4));
        ValueRange received = wait.getReady();
        Value rows = rankPart(b, loc, received[0], rank);
        Value slots = rankPart(b, loc, received[2], rank);
        Value counts = rankPart(b, loc, received[3], rank);
        auto rowsType = cast<RankedTensorType>(rows.getType());
        int64_t numRows = rowsType.getDimSize(0);
        // The received weights as routed weights of one slot per row.
        Value weights = tensor::ExpandShapeOp::create(
            b, loc, RankedTensorType::get({numRows, 1}, b.getF32Type()),
            rankPart(b, loc, received[1], rank),
            ArrayRef<ReassociationIndices>{{0, 1}});
        Type i32 = b.getI32Type();
        int64_t capacity =
            RouteOp::getCapacity(numRows, types.counts.getDimSize(1), blockM);
        int64_t numBlocks = llvm::divideCeil(capacity, blockM);
        auto route =
            EpRouteOp::create(b, loc, RankedTensorType::get({capacity}, i32),
                              RankedTensorType::get({numBlocks}, i32),
                              RankedTensorType::get({}, i32), counts, blockM);
        Value outputs =
            buildExpertGemms(b, loc, rows, weights,
                             {route.getSortedIds(), route.getExpertIds(),
                              route.getNumPadded(), blockM,
                              /*numSlots=*/1},
                             mlp.lookup(mapping));
        Value outputRows = tensor::CollapseShapeOp::create(
            b, loc, rowsType, outputs,
            ArrayRef<ReassociationIndices>{{0, 1}, {2}});
        Value returned = EpCombineOp::create(b, loc, types.returned, outputRows,
                                             slots, counts, returnBuffer)
                             .getOutput();
        return {returned, buildSignal(b, layer, combineFlags),
                wait.getUpdatedStatus()};
      });
}

/// Phase 3: once every rank's experts phase returned its rows, the sum of
/// the rank's returned rows, in slot order.
func::FuncOp buildCombine(OpBuilder &b, FusedMoeOp layer, StringRef name,
                          const ExchangeTypes &types) {
  return buildPhase(
      b, layer, name, {}, {types.returned, types.flags}, {types.status},
      [&](IRMapping &, ValueRange args) -> SmallVector<Value> {
        Location loc = layer.getLoc();
        Value returned = args[0], flags = args[1], status = args[2];
        EpWaitOp wait = buildWait(b, layer, EpWaitOp::kCombinePhase, flags,
                                  status, returned);
        Value rows = rankPart(b, loc, wait.getReady()[0],
                              layer.getExpertParallelAttr().getRank());
        return {CombineOp::create(b, loc, layer.getType(), rows,
                                  /*weights=*/Value(), /*ids=*/Value(),
                                  /*num_experts=*/IntegerAttr()),
                wait.getUpdatedStatus()};
      });
}

/// The expert-parallel layer that `function` computes alone (its arguments
/// the layer's operands, the layer returned); a diagnostic when it holds
/// one otherwise, null when it holds none.
FailureOr<FusedMoeOp> getExpertParallelLayer(func::FuncOp function) {
  SmallVector<FusedMoeOp> layers;
  function.walk([&](FusedMoeOp op) {
    if (op.getExpertParallelAttr())
      layers.push_back(op);
  });
  if (layers.empty())
    return FusedMoeOp();
  FusedMoeOp layer = layers.front();
  Block &body = function.getBody().front();
  auto isArgument = [&](Value value) {
    auto argument = dyn_cast<BlockArgument>(value);
    return argument && argument.getOwner() == &body;
  };
  auto returnOp = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (layers.size() != 1 || !function.getBody().hasOneBlock() ||
      &body.front() != layer.getOperation() || !returnOp ||
      returnOp.getOperands() != ValueRange(layer.getOutput()) ||
      !llvm::all_of(layer->getOperands(), isArgument))
    return layer.emitOpError()
           << "moe-expert-parallel: expects the expert-parallel layer alone "
              "in its function (operands its arguments, its result "
              "returned), which splits into the phases between the exchanges";
  return layer;
}

struct MoeExpertParallelPass
    : moe::impl::MoeExpertParallelBase<MoeExpertParallelPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(checkSizeOptions(getOperation(), "moe-expert-parallel",
                                {{"block-m", blockM, 0}})))
      return signalPassFailure();
    if (!llvm::is_contained({"", "dispatch", "experts", "combine"}, phase)) {
      getOperation().emitError()
          << "moe-expert-parallel: unknown phase '" << phase
          << "' (dispatch, experts or combine; empty for all three)";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> functions(getOperation().getOps<func::FuncOp>());
    bool split = false;
    for (func::FuncOp function : functions) {
      FailureOr<FusedMoeOp> layer = getExpertParallelLayer(function);
      if (failed(layer))
        return signalPassFailure();
      if (!*layer)
        continue;
      split = true;
      ExchangeTypes types = ExchangeTypes::of(*layer);
      FailureOr<int64_t> rows = routingBlockM(*layer, types);
      if (failed(rows))
        return signalPassFailure();
      OpBuilder b(function);
      b.setInsertionPointAfter(function);
      std::string name = function.getSymName().str();
      std::pair<StringRef, func::FuncOp> phases[] = {
          {"dispatch", buildDispatch(b, *layer, name + "_dispatch", types)},
          {"experts", buildExperts(b, *layer, name + "_experts", types, *rows)},
          {"combine", buildCombine(b, *layer, name + "_combine", types)}};
      for (auto [kind, built] : phases)
        if (!phase.empty() && kind != phase)
          built.erase();
      function.erase();
    }
    if (!split && !phase.empty()) {
      getOperation().emitError()
          << "moe-expert-parallel: phase '" << phase
          << "' given, but no function computes an expert-parallel layer";
      return signalPassFailure();
    }
  }

  /// The routing block of `layer`'s experts phase: `block-m`, or when 0 the
  /// single-device layer's at the T*W tokens of all ranks; a diagnostic
  /// when the routing of the receive rows in such blocks overflows the
  /// kernels' i32 rows (MoeLimits.h).
  FailureOr<int64_t> routingBlockM(FusedMoeOp layer,
                                   const ExchangeTypes &types) {
    int64_t world = types.counts.getDimSize(0);
    int64_t local = types.counts.getDimSize(1);
    int64_t tokens = types.returned.getDimSize(1);
    int64_t rows = blockM;
    if (!rows) {
      RouterAttr router = layer.getRouter();
      QuantizationAttr quantization = layer.getQuantizationAttr();
      rows = chooseRoutingBlockM(
          tokens * world, router.getNumSlots(),
          cast<RankedTensorType>(layer.getRouterLogits().getType())
                  .getDimSize(1) +
              router.getNumSharedExperts(),
          quantization && quantization.getWeights() == WeightScaling::block);
    }
    std::string cause =
        blockM ? "moe-expert-parallel: block-m = " + std::to_string(rows)
               : "moe-expert-parallel: its routing block of " +
                     std::to_string(rows) + " rows";
    // The receive rows route as L*W*C tokens of one slot each.
    if (failed(verifyRoutingCapacity([&] { return layer.emitOpError(); }, cause,
                                     types.weights.getDimSize(1),
                                     /*slots=*/1, local, rows)))
      return failure();
    return rows;
  }
};

} // namespace
