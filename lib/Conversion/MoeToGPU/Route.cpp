//===- Route.cpp - moe.route to GPU kernels -------------------------------===//
//
// A counting sort of the slots by expert on the device, with no host sync:
// per-chunk histograms (whose grid also fills every row with the padding
// sentinel), one block that scans them into stable offsets padded to whole
// routing blocks, and a stable placement of the slots' rows over the fill.
//
//===----------------------------------------------------------------------===//

#include "Lowerings.h"
#include "WarpBuilder.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

constexpr int64_t kRouteThreads = 512;
constexpr int64_t kRouteWarps = kRouteThreads / kWarpSize;
constexpr int64_t kScanThreads = 1024;

/// Emits `for i = start; i < end; i += step` (index values).
void strided(LoopBuilder &lb, Value start, Value end, Value step,
             function_ref<void(Value)> body) {
  auto forOp = scf::ForOp::create(lb.b, start, end, step);
  OpBuilder::InsertionGuard guard(lb.b);
  lb.b.setInsertionPointToStart(forOp.getBody());
  body(forOp.getInductionVar());
}
void strided(LoopBuilder &lb, Value start, Value end, int64_t step,
             function_ref<void(Value)> body) {
  strided(lb, start, end, lb.index(step), body);
}

/// The sizes of a moe.route and the plan buffers its kernels share: chunks
/// of kRouteThreads slots, per-chunk expert offsets, padded expert offsets.
struct RoutePlan {
  int64_t numExperts, blockM, slots;
  SizeExpr chunks;
  unsigned ids, sortedIds, expertIds, numPadded;
  /// The three-kernel route's scratch buffers (not the single block's).
  unsigned blockOffsets, expertOffsets;
};

/// The thread's slot of chunk `chunk` (kRouteThreads slots), its expert,
/// and whether that is in range (else the expert reads as -1).
std::tuple<Value, Value, Value> loadSlot(WarpBuilder &wb,
                                         const RoutePlan &route,
                                         Value idsBuffer, Value numTokens,
                                         Value chunk) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t slots = route.slots, numExperts = route.numExperts;
  Value slot = arith::AddIOp::create(
      b, arith::MulIOp::create(b, chunk, wb.index(kRouteThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value inRange = wb.cmpi(arith::CmpIPredicate::ult, slot,
                          arith::MulIOp::create(b, numTokens, wb.index(slots)));
  Value safe = wb.select(inRange, slot, wb.index(0));
  Value expert =
      wb.load(idsBuffer, {arith::DivUIOp::create(b, safe, wb.index(slots)),
                          arith::RemUIOp::create(b, safe, wb.index(slots))});
  Value valid = arith::AndIOp::create(
      b, inRange, wb.inRange(expert, wb.i32(0), wb.i32(numExperts)));
  return {slot, wb.select(valid, expert, wb.i32(-1)), valid};
}

/// The shared state of a block that has scanned the experts' padded row
/// counts: `scan[e]` ends expert e's padded rows; thread `tid` < E is
/// expert `expert` with `padded` padded rows.
struct ScannedExperts {
  Value scan, tid, expert, isExpert, padded;
};

/// The routing results.
struct RouteOutputs {
  Value sortedIds, expertIds, numPadded;
};

/// Every row of `sortedIds` (up to the capacity) the sentinel T*S and every
/// block of `expertIds` -1: thread `thread` of `threads`, a row or block in
/// `threads`. The route writes its rows and blocks over them afterwards (a
/// barrier or a kernel later), which costs less than finding the padding
/// rows: a pass over E x block_m (expert, row) pairs.
void fillRouteOutputs(WarpBuilder &wb, const RoutePlan &route, Value thread,
                      Value threads, Value routedSlots,
                      const RouteOutputs &out) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t blockM = route.blockM;
  Value sentinel = wb.toI32(routedSlots);
  Value rowCapacity = arith::AddIOp::create(
      b, routedSlots, wb.index(route.numExperts * (blockM - 1)));
  strided(wb, thread, rowCapacity, threads,
          [&](Value row) { wb.store(sentinel, out.sortedIds, row); });
  strided(wb, thread,
          arith::CeilDivUIOp::create(b, rowCapacity, wb.index(blockM)), threads,
          [&](Value block) { wb.store(wb.i32(-1), out.expertIds, block); });
}

/// Of a block of `threads` threads that scanned the experts' padded counts:
/// each expert's block ids (its thread), and the padded count.
void emitBlocks(WarpBuilder &wb, const RoutePlan &route, int64_t threads,
                const ScannedExperts &experts, const RouteOutputs &out) {
  ImplicitLocOpBuilder &b = wb.b;
  Value blockRows = wb.i32(route.blockM);
  wb.ifThen(experts.isExpert, [&] {
    Value offset = arith::SubIOp::create(b, wb.load(experts.scan, experts.tid),
                                         experts.padded);
    Value firstBlock = arith::DivUIOp::create(b, offset, blockRows);
    Value endBlock = arith::DivUIOp::create(
        b, arith::AddIOp::create(b, offset, experts.padded), blockRows);
    wb.loop(wb.toIndex(firstBlock), wb.toIndex(endBlock), [&](Value block) {
      wb.store(wb.toI32(experts.expert), out.expertIds, block);
    });
  });
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, experts.tid, wb.index(0)), [&] {
    wb.store(wb.load(experts.scan, wb.index(threads - 1)), out.numPadded, {});
  });
}

/// The rank of the thread's slot among the earlier lanes of its warp routed
/// to its expert (match.any); the lowest such lane stores the warp's count
/// of that expert at `warpCounts[warp, expert]`.
Value emitWarpRank(WarpBuilder &wb, Value expert, Value valid, Value warp,
                   Value warpCounts) {
  ImplicitLocOpBuilder &b = wb.b;
  Type i32 = b.getI32Type();
  Value same = NVVM::MatchSyncOp::create(
      b, i32, wb.i32(-1), expert,
      NVVM::MatchSyncKindAttr::get(b.getContext(), NVVM::MatchSyncKind::any));
  Value below =
      arith::AndIOp::create(b, same, NVVM::LaneMaskLtOp::create(b, i32));
  Value leader = wb.cmpi(arith::CmpIPredicate::eq, below, wb.i32(0));
  wb.ifThen(arith::AndIOp::create(b, valid, leader), [&] {
    wb.store(LLVM::CtPopOp::create(b, same), warpCounts,
             {warp, wb.toIndex(expert)});
  });
  return LLVM::CtPopOp::create(b, below);
}

/// 1. Per-chunk histograms of the slots' experts.
void emitCountKernel(PlanBuilder &plan, OpBuilder &builder, Location loc,
                     const RoutePlan &route) {
  int64_t numExperts = route.numExperts;
  Type i32 = builder.getI32Type();
  KernelArgList args;
  unsigned idsArg = args.add(route.ids);
  unsigned chunkCountsArg = args.add(route.blockOffsets);
  unsigned sortedIdsArg = args.add(route.sortedIds);
  unsigned expertIdsArg = args.add(route.expertIds);
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, loc, "moe_route_count", args.get(),
      {route.chunks, PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kRouteThreads, 1, 1}, {workgroupMemRef({numExperts}, i32)});
  ImplicitLocOpBuilder b(loc, builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value counts = kernel.getWorkgroupAttributions()[0];
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  // The whole grid fills the routing outputs; the scan's blocks and the
  // placement's rows go over them in the kernels after this one.
  fillRouteOutputs(
      wb, route,
      arith::AddIOp::create(
          b, arith::MulIOp::create(b, chunk, wb.index(kRouteThreads)), tid),
      arith::MulIOp::create(b, gpu::GridDimOp::create(b, gpu::Dimension::x),
                            wb.index(kRouteThreads)),
      arith::MulIOp::create(b, numTokens, wb.index(route.slots)),
      {kernel.getArgument(sortedIdsArg), kernel.getArgument(expertIdsArg),
       Value()});
  strided(wb, tid, wb.index(numExperts), kRouteThreads,
          [&](Value e) { wb.store(wb.i32(0), counts, e); });
  gpu::BarrierOp::create(b);
  Value slot, expert, valid;
  std::tie(slot, expert, valid) =
      loadSlot(wb, route, kernel.getArgument(idsArg), numTokens, chunk);
  wb.ifThen(valid, [&] {
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, wb.i32(1),
                                counts, ValueRange{wb.toIndex(expert)});
  });
  gpu::BarrierOp::create(b);
  strided(wb, tid, wb.index(numExperts), kRouteThreads, [&](Value e) {
    wb.store(wb.load(counts, e), kernel.getArgument(chunkCountsArg),
             {chunk, e});
  });
}

/// 2. One block: stable per-chunk offsets, padded expert offsets, block
/// experts and the padded count (the sentinels are the count kernel's fill).
void emitScanKernel(PlanBuilder &plan, OpBuilder &builder, Location loc,
                    const RoutePlan &route) {
  int64_t numExperts = route.numExperts, blockM = route.blockM;
  int64_t slots = route.slots;
  Type i32 = builder.getI32Type();
  KernelArgList args;
  unsigned chunkOffsetsArg = args.add(route.blockOffsets);
  unsigned expertOffsetsArg = args.add(route.expertOffsets);
  unsigned expertIdsArg = args.add(route.expertIds);
  unsigned numPaddedArg = args.add(route.numPadded);
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, loc, "moe_route_scan", args.get(),
      {PlanBuilder::constant(1), PlanBuilder::constant(1),
       PlanBuilder::constant(1)},
      {kScanThreads, 1, 1}, {workgroupMemRef({kScanThreads}, i32)});
  ImplicitLocOpBuilder b(loc, builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value scan = kernel.getWorkgroupAttributions()[0];
  Value offsetsPerChunk = kernel.getArgument(chunkOffsetsArg);
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value routedSlots = arith::MulIOp::create(b, numTokens, wb.index(slots));
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
  Value offset = arith::SubIOp::create(
      b, blockInclusiveSum(wb, scan, tid, padded, kScanThreads), padded);
  wb.ifThen(isExpert, [&] {
    wb.store(offset, kernel.getArgument(expertOffsetsArg), expert);
  });
  emitBlocks(wb, route, kScanThreads, {scan, tid, expert, isExpert, padded},
             {Value(), kernel.getArgument(expertIdsArg),
              kernel.getArgument(numPaddedArg)});
}

/// Places the slots of chunk `chunk` of a block of kRouteThreads threads in
/// order into `sortedIds`: each slot ranked within its warp, each expert's
/// warps in turn from `start(e)` (in `warpCounts`, [kRouteWarps, E] shared),
/// `finish(e, end)` told where expert e's slots of the chunk end.
void emitPlaceChunk(WarpBuilder &wb, const RoutePlan &route, Value ids,
                    Value numTokens, Value chunk, Value warpCounts,
                    Value sortedIds, function_ref<Value(Value)> start,
                    function_ref<void(Value, Value)> finish) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t numExperts = route.numExperts;
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(b, tid, wb.index(kWarpSize));
  strided(wb, tid, wb.index(kRouteWarps * numExperts), kRouteThreads,
          [&](Value i) {
            wb.store(wb.i32(0), warpCounts,
                     {arith::DivUIOp::create(b, i, wb.index(numExperts)),
                      arith::RemUIOp::create(b, i, wb.index(numExperts))});
          });
  gpu::BarrierOp::create(b);
  Value slot, expert, valid;
  std::tie(slot, expert, valid) = loadSlot(wb, route, ids, numTokens, chunk);
  Value rank = emitWarpRank(wb, expert, valid, warp, warpCounts);
  gpu::BarrierOp::create(b);
  strided(wb, tid, wb.index(numExperts), kRouteThreads, [&](Value e) {
    Value end = wb.loop(wb.index(0), wb.index(kRouteWarps), {start(e)},
                        [&](Value w, ValueRange carried) -> SmallVector<Value> {
                          Value count = wb.load(warpCounts, {w, e});
                          wb.store(carried[0], warpCounts, {w, e});
                          return {arith::AddIOp::create(b, carried[0], count)};
                        })[0];
    finish(e, end);
  });
  gpu::BarrierOp::create(b);
  wb.ifThen(valid, [&] {
    Value row = arith::AddIOp::create(
        b, wb.load(warpCounts, {warp, wb.toIndex(expert)}), rank);
    wb.store(wb.toI32(slot), sortedIds, wb.toIndex(row));
  });
}

/// 3. Stable placement: rank within the warp by match.any, across warps
/// through shared per-warp counts, across chunks by the scanned offsets.
void emitPlaceKernel(PlanBuilder &plan, OpBuilder &builder, Location loc,
                     const RoutePlan &route) {
  int64_t numExperts = route.numExperts;
  Type i32 = builder.getI32Type();
  KernelArgList args;
  unsigned idsArg = args.add(route.ids);
  unsigned chunkOffsetsArg = args.add(route.blockOffsets);
  unsigned expertOffsetsArg = args.add(route.expertOffsets);
  unsigned sortedIdsArg = args.add(route.sortedIds);
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, loc, "moe_route_place", args.get(),
      {route.chunks, PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kRouteThreads, 1, 1}, {workgroupMemRef({kRouteWarps, numExperts}, i32)});
  ImplicitLocOpBuilder b(loc, builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  emitPlaceChunk(
      wb, route, kernel.getArgument(idsArg), wb.toIndex(tokenCount(kernel)),
      chunk, kernel.getWorkgroupAttributions()[0],
      kernel.getArgument(sortedIdsArg),
      [&](Value e) -> Value {
        return arith::AddIOp::create(
            b, wb.load(kernel.getArgument(expertOffsetsArg), e),
            wb.load(kernel.getArgument(chunkOffsetsArg), {chunk, e}));
      },
      [](Value, Value) {});
}

/// The whole route in one block of kRouteThreads threads, where the three
/// kernels above take three launches: the experts' counts by shared
/// atomics, the padded scan, then the chunks of slots placed in order
/// through per-warp counts. Right for any T (the chunks loop), chosen for
/// the token counts whose slots one chunk holds (decode). E <= kRouteThreads.
/// Given the `gate` of its ids (getFusedGate), the block computes it first,
/// a token a warp.
void emitSingleBlockRoute(PlanBuilder &plan, OpBuilder &builder, Location loc,
                          const RoutePlan &route, GateOp gate) {
  int64_t numExperts = route.numExperts, blockM = route.blockM;
  Type i32 = builder.getI32Type();
  KernelArgList args;
  std::optional<GateArgs> gateArgs;
  if (gate)
    gateArgs = addGateArgs(plan, args, gate);
  unsigned idsArg = gate ? gateArgs->ids : args.add(route.ids);
  unsigned sortedIdsArg = args.add(route.sortedIds);
  unsigned expertIdsArg = args.add(route.expertIds);
  unsigned numPaddedArg = args.add(route.numPadded);
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, loc, gate ? "moe_gate_route_block" : "moe_route_block",
      args.get(),
      {PlanBuilder::constant(1), PlanBuilder::constant(1),
       PlanBuilder::constant(1)},
      {kRouteThreads, 1, 1},
      {workgroupMemRef({kRouteThreads}, i32),
       workgroupMemRef({numExperts}, i32),
       workgroupMemRef({kRouteWarps, numExperts}, i32)});
  ImplicitLocOpBuilder b(loc, builder);
  WarpBuilder wb = makeWarpBuilder(b);
  ValueRange shared = kernel.getWorkgroupAttributions();
  // bases: each expert's rows, then where its next slot goes.
  Value scan = shared[0], bases = shared[1], warpCounts = shared[2];
  Value ids = kernel.getArgument(idsArg);
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value routedSlots =
      arith::MulIOp::create(b, numTokens, wb.index(route.slots));
  Value numChunks =
      arith::CeilDivUIOp::create(b, routedSlots, wb.index(kRouteThreads));
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  RouteOutputs out{kernel.getArgument(sortedIdsArg),
                   kernel.getArgument(expertIdsArg),
                   kernel.getArgument(numPaddedArg)};
  // The fill first, while the gating warps work: the blocks and the
  // placement below write theirs over it after barriers.
  fillRouteOutputs(wb, route, tid, wb.index(kRouteThreads), routedSlots, out);
  // Warp w gates token w; the barrier below orders its stores of the ids
  // before the loads of every thread.
  if (gate) {
    Value warp = arith::DivUIOp::create(b, tid, wb.index(kWarpSize));
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, warp, numTokens),
              [&] { emitGateToken(b, gate, kernel, *gateArgs, warp); });
  }
  strided(wb, tid, wb.index(numExperts), kRouteThreads,
          [&](Value e) { wb.store(wb.i32(0), bases, e); });
  gpu::BarrierOp::create(b);
  wb.loop(wb.index(0), numChunks, [&](Value chunk) {
    Value slot, expert, valid;
    std::tie(slot, expert, valid) = loadSlot(wb, route, ids, numTokens, chunk);
    wb.ifThen(valid, [&] {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, wb.i32(1),
                                  bases, ValueRange{wb.toIndex(expert)});
    });
  });
  gpu::BarrierOp::create(b);
  Value isExpert =
      wb.cmpi(arith::CmpIPredicate::ult, tid, wb.index(numExperts));
  Value expert = wb.select(isExpert, tid, wb.index(0));
  Value rows = wb.select(isExpert, wb.load(bases, expert), wb.i32(0));
  Value blockRows = wb.i32(blockM);
  Value padded = arith::MulIOp::create(
      b, arith::CeilDivUIOp::create(b, rows, blockRows), blockRows);
  Value end = blockInclusiveSum(wb, scan, tid, padded, kRouteThreads);
  emitBlocks(wb, route, kRouteThreads, {scan, tid, expert, isExpert, padded},
             out);
  wb.ifThen(isExpert, [&] {
    wb.store(arith::SubIOp::create(b, end, padded), bases, expert);
  });
  gpu::BarrierOp::create(b);
  wb.loop(wb.index(0), numChunks, [&](Value chunk) {
    emitPlaceChunk(
        wb, route, ids, numTokens, chunk, warpCounts, out.sortedIds,
        [&](Value e) -> Value { return wb.load(bases, e); },
        [&](Value e, Value end) { wb.store(end, bases, e); });
    gpu::BarrierOp::create(b);
  });
}

/// Whether `choiceTokens`' slots fit one chunk: one launch instead of three.
bool routesInOneBlock(RouteOp op, int64_t choiceTokens) {
  int64_t slots = cast<RankedTensorType>(op.getIds().getType()).getDimSize(1);
  return choiceTokens * slots <= kRouteThreads &&
         op.getNumExperts() <= kRouteThreads;
}

} // namespace

GateOp mlir::moe::detail::getFusedGate(RouteOp op, int64_t choiceTokens) {
  auto gate = op.getIds().getDefiningOp<GateOp>();
  if (!gate || choiceTokens > kRouteWarps ||
      !routesInOneBlock(op, choiceTokens) || gate->getBlock() != op->getBlock())
    return {};
  for (Operation *user : gate->getUsers())
    if (user != op && !op->isBeforeInBlock(user))
      return {};
  return gate;
}

LogicalResult mlir::moe::detail::emitRoute(PlanBuilder &plan,
                                           OpBuilder &builder, RouteOp op,
                                           int64_t choiceTokens) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t numExperts = op.getNumExperts(), blockM = op.getBlockM();
  int64_t slots = cast<RankedTensorType>(op.getIds().getType()).getDimSize(1);
  if (numExperts > kScanThreads)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kScanThreads << " experts";
  Type i32 = builder.getI32Type();
  SizeExpr capacity = plan.affine(slots, numExperts * (blockM - 1));
  SizeExpr chunks = PlanBuilder::ceilDiv(plan.affine(slots, 0), kRouteThreads);
  RoutePlan route{
      numExperts,
      blockM,
      slots,
      chunks,
      plan.use(op.getIds()),
      plan.define(op.getSortedIds(), "route_sorted_ids", {capacity}),
      plan.define(op.getExpertIds(), "route_expert_ids",
                  {PlanBuilder::ceilDiv(capacity, blockM)}),
      plan.define(op.getNumPadded(), "route_num_padded", {}),
      /*blockOffsets=*/0,
      /*expertOffsets=*/0};
  if (routesInOneBlock(op, choiceTokens)) {
    emitSingleBlockRoute(plan, builder, op.getLoc(), route,
                         getFusedGate(op, choiceTokens));
    return success();
  }
  SizeExpr experts = PlanBuilder::constant(numExperts);
  route.blockOffsets =
      plan.scratch("route_block_offsets", i32, {chunks, experts});
  route.expertOffsets = plan.scratch("route_expert_offsets", i32, {experts});
  emitCountKernel(plan, builder, op.getLoc(), route);
  emitScanKernel(plan, builder, op.getLoc(), route);
  emitPlaceKernel(plan, builder, op.getLoc(), route);
  return success();
}
