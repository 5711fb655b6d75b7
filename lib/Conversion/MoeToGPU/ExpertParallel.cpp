//===- ExpertParallel.cpp - The exchange ops to GPU kernels ---------------===//
//
// moe.ep_dispatch, moe.ep_route and moe.ep_combine, the kernels between
// which the ranks of an expert-parallel layer exchange rows, and
// moe.ep_signal and moe.ep_wait, which tell the ranks that an exchange is
// complete. The buffers of all W ranks (`[W, ...]` operands) are reached
// through peer tables, one pointer per rank (LaunchArgKind::peers), so that
// the same kernel stores into one GPU's simulated world or into the peers'
// symmetric memory. Each kernel writes exactly what the op's CPU lowering
// writes (MoeToLoops.cpp), in the same places, rows of a region in slot
// order included; the wait, which the CPU path only checks, spins.
//
//===----------------------------------------------------------------------===//

#include "Lowerings.h"
#include "WarpBuilder.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

constexpr int64_t kExchangeThreads = 128;
constexpr int64_t kExchangeWarps = kExchangeThreads / kWarpSize;
/// The threads of a block of moe_ep_route, one per local expert in its
/// scan.
constexpr int64_t kEpRouteThreads = 1024;
/// The most ranks of moe_ep_signal and moe_ep_wait, whose one block has a
/// thread per rank.
constexpr int64_t kMaxFlagRanks = 1024;
/// How long moe_ep_wait spins on a source's flag before it gives up and
/// records the source in the status: about 10 s of %globaltimer, orders of
/// magnitude beyond what a live peer's phase should take, yet short enough
/// that a dead or mismatched peer fails a run instead of hanging it.
constexpr int64_t kEpWaitTimeoutNs = 10'000'000'000;
/// The sleep between two reads of a flag (nanosleep's bound): short beside
/// a phase, so that the wait ends soon after the flag, while a spinning
/// thread leaves the interconnect and its multiprocessor alone.
constexpr int64_t kEpWaitSleepNs = 128;

/// The sizes of a receive buffer: L local experts (`routedLocal` of them
/// routed), W ranks, C rows per (local expert, source rank) region.
struct ReceiveLayout {
  int64_t local, routedLocal, world, capacity;

  int64_t rows() const { return local * world * capacity; }
  /// Row (e * W + src) * C + i.
  Value row(LoopBuilder &lb, Value e, Value src, Value i) const {
    ImplicitLocOpBuilder &b = lb.b;
    Value region = arith::AddIOp::create(
        b, arith::MulIOp::create(b, e, lb.index(world)), src);
    return arith::AddIOp::create(
        b, arith::MulIOp::create(b, region, lb.index(capacity)), i);
  }
  /// counts[e, src] of a `[L, W]` counts row, clamped to [0, C]: the rows
  /// written (past C none were).
  Value current(LoopBuilder &lb, Value count) const {
    ImplicitLocOpBuilder &b = lb.b;
    Value nonNegative = arith::MaxSIOp::create(b, count, lb.i32(0));
    return arith::MinSIOp::create(b, nonNegative, lb.i32(capacity));
  }
};

/// Rank `rank`'s slice of a buffer whose peer table is `table`: a pointer to
/// elements of `element` type, stored into by index.
struct PeerSlice {
  Value base;
  Type element;

  static PeerSlice of(ImplicitLocOpBuilder &b, Value table, Value rank,
                      Type element) {
    auto pointer = LLVM::LLVMPointerType::get(b.getContext());
    Value entry = LLVM::GEPOp::create(b, pointer, pointer, table,
                                      ValueRange{toI64(b, rank)});
    return {LLVM::LoadOp::create(b, pointer, entry), element};
  }
  /// The address of element `index` of the slice.
  Value address(ImplicitLocOpBuilder &b, Value index) const {
    return LLVM::GEPOp::create(b, LLVM::LLVMPointerType::get(b.getContext()),
                               element, base, ValueRange{toI64(b, index)});
  }
  /// Stores `value` (an element, or a vector of them `alignment` bytes
  /// wide) at element `index` of the slice.
  void store(ImplicitLocOpBuilder &b, Value value, Value index,
             unsigned alignment = 0) const {
    LLVM::StoreOp::create(b, value, address(b, index), alignment);
  }
  static Value toI64(ImplicitLocOpBuilder &b, Value indexValue) {
    return arith::IndexCastOp::create(b, b.getI64Type(), indexValue);
  }
};

/// A row of H elements copied by the lanes of a warp, 16 bytes (or the
/// widest vector that divides H) per lane and step.
struct RowCopy {
  Type element;
  int64_t hidden, width;

  static RowCopy of(Type element, int64_t hidden) {
    int64_t width = 16 / (element.getIntOrFloatBitWidth() / 8);
    while (hidden % width)
      width /= 2;
    return {element, hidden, width};
  }
  unsigned alignment() const {
    return width * element.getIntOrFloatBitWidth() / 8;
  }
  /// Copies row `row` of `source` (a `[rows, H]` memref) to the row that
  /// starts at element `start` of `target`. Rows start aligned (the runtime
  /// checks the bases, H is a multiple of the width), so the vectors are.
  void emit(WarpBuilder &wb, Value source, Value row, const PeerSlice &target,
            Value start) const {
    ImplicitLocOpBuilder &b = wb.b;
    auto type = VectorType::get({width}, element);
    Value first = arith::MulIOp::create(b, wb.lane, wb.index(width));
    auto loop = scf::ForOp::create(b, first, wb.index(hidden),
                                   wb.index(kWarpSize * width));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value column = loop.getInductionVar();
    Value vector =
        vector::LoadOp::create(b, type, source, ValueRange{row, column},
                               /*nontemporal=*/false, llvm::Align(alignment()));
    target.store(b, vector, arith::AddIOp::create(b, start, column),
                 alignment());
  }
};

/// The warp of this thread across the grid, one per work item.
Value globalWarp(WarpBuilder &wb) {
  ImplicitLocOpBuilder &b = wb.b;
  Value warp = arith::DivUIOp::create(
      b, gpu::ThreadIdOp::create(b, gpu::Dimension::x), wb.index(kWarpSize));
  return arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kExchangeWarps)),
      warp);
}

/// The grid of `items` warps.
SmallVector<SizeExpr> warpGrid(int64_t items) {
  return {PlanBuilder::constant(llvm::divideCeil(items, kExchangeWarps)),
          PlanBuilder::constant(1), PlanBuilder::constant(1)};
}

/// The operands of the dispatch kernel of one region.
struct DispatchRegion {
  const ReceiveLayout &layout;
  int64_t numExperts, numSlots, tokens, rank;
  Value hidden, ids, weights;
  PeerSlice rows, routedWeights, slots, counts;
  RowCopy copy;
};

/// The rows of `region`'s chunk of 32 slots from `chunk` that `mask` (bit j:
/// slot chunk * 32 + j goes to the region) sends, in slot order from
/// position `count` of the region's rows from this rank.
void sendChunk(WarpBuilder &wb, const DispatchRegion &region, Value e,
               Value chunk, Value mask, Value count) {
  ImplicitLocOpBuilder &b = wb.b;
  Value rankIndex = wb.index(region.rank);
  wb.loop(kWarpSize, [&](Value j) {
    Value jI32 = wb.toI32(j);
    Value bit = arith::AndIOp::create(b, arith::ShRUIOp::create(b, mask, jI32),
                                      wb.i32(1));
    Value below = arith::AndIOp::create(
        b, mask,
        arith::SubIOp::create(b, arith::ShLIOp::create(b, wb.i32(1), jI32),
                              wb.i32(1)));
    Value position =
        arith::AddIOp::create(b, count, LLVM::CtPopOp::create(b, below));
    Value sent = arith::AndIOp::create(
        b, wb.cmpi(arith::CmpIPredicate::ne, bit, wb.i32(0)),
        wb.cmpi(arith::CmpIPredicate::slt, position,
                wb.i32(region.layout.capacity)));
    wb.ifThen(sent, [&] {
      Value slot = arith::AddIOp::create(
          b, arith::MulIOp::create(b, chunk, wb.index(kWarpSize)), j);
      Value t = arith::DivUIOp::create(b, slot, wb.index(region.numSlots));
      Value s = arith::RemUIOp::create(b, slot, wb.index(region.numSlots));
      Value row = region.layout.row(wb, e, rankIndex, wb.toIndex(position));
      region.copy.emit(
          wb, region.hidden, t, region.rows,
          arith::MulIOp::create(b, row, wb.index(region.copy.hidden)));
      wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)), [&] {
        region.routedWeights.store(b, wb.load(region.weights, {t, s}), row);
        region.slots.store(b, wb.toI32(slot), row);
      });
    });
  });
}

/// The body of the dispatch kernel for region (d, e) of rank d's buffer
/// from this rank: its warp scans the slots 32 at a time, sends the
/// matching ones in slot order and stores the count.
void emitDispatchRegion(WarpBuilder &wb, const DispatchRegion &region, Value d,
                        Value e) {
  ImplicitLocOpBuilder &b = wb.b;
  const ReceiveLayout &layout = region.layout;
  // Region (d, e) receives routed expert d * E/W + e, or on this rank the
  // shared expert E + e - E/W; a shared region of another rank nothing.
  Value dI32 = wb.toI32(d), eI32 = wb.toI32(e);
  Value routed =
      wb.cmpi(arith::CmpIPredicate::slt, eI32, wb.i32(layout.routedLocal));
  Value expert = wb.select(
      routed,
      arith::AddIOp::create(
          b, arith::MulIOp::create(b, dI32, wb.i32(layout.routedLocal)), eI32),
      arith::AddIOp::create(b, eI32,
                            wb.i32(region.numExperts - layout.routedLocal)));
  Value receives = arith::OrIOp::create(
      b, routed, wb.cmpi(arith::CmpIPredicate::eq, dI32, wb.i32(region.rank)));
  expert = wb.select(receives, expert, wb.i32(-1));
  int64_t slots = region.tokens * region.numSlots;
  Value count = wb.loop(
      wb.index(0), wb.index(llvm::divideCeil(slots, kWarpSize)), {wb.i32(0)},
      [&](Value chunk, ValueRange carried) -> SmallVector<Value> {
        Value slot = arith::AddIOp::create(
            b, arith::MulIOp::create(b, chunk, wb.index(kWarpSize)), wb.lane);
        Value inRange =
            wb.cmpi(arith::CmpIPredicate::ult, slot, wb.index(slots));
        Value safe = wb.select(inRange, slot, wb.index(0));
        Value id = wb.load(
            region.ids,
            {arith::DivUIOp::create(b, safe, wb.index(region.numSlots)),
             arith::RemUIOp::create(b, safe, wb.index(region.numSlots))});
        Value match = arith::AndIOp::create(
            b, inRange, wb.cmpi(arith::CmpIPredicate::eq, id, expert));
        Value mask = NVVM::VoteSyncOp::create(
            b, b.getI32Type(), wb.i32(-1), match, NVVM::VoteSyncKind::ballot);
        wb.ifThen(wb.cmpi(arith::CmpIPredicate::ne, mask, wb.i32(0)),
                  [&] { sendChunk(wb, region, e, chunk, mask, carried[0]); });
        return {arith::AddIOp::create(b, carried[0],
                                      LLVM::CtPopOp::create(b, mask))};
      })[0];
  // Every count of this rank, 0 included: nothing clears the buffers.
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)), [&] {
    Value index = arith::AddIOp::create(
        b, arith::MulIOp::create(b, e, wb.index(layout.world)),
        wb.index(region.rank));
    region.counts.store(b, count, index);
  });
}

/// The local expert whose blocks hold position `position` (i32) below the
/// padded count: the first e with ends[e] > position, by binary search over
/// the `local` inclusive ends of the experts' blocks in `ends`.
Value findExpert(LoopBuilder &lb, Value ends, int64_t local, Value position) {
  ImplicitLocOpBuilder &b = lb.b;
  Value lo = lb.index(0), hi = lb.index(local - 1);
  for (unsigned step = 0; step < llvm::Log2_64_Ceil(local); ++step) {
    Value mid = arith::DivUIOp::create(b, arith::AddIOp::create(b, lo, hi),
                                       lb.index(2));
    Value past =
        lb.cmpi(arith::CmpIPredicate::sgt, lb.load(ends, mid), position);
    hi = lb.select(past, mid, hi);
    lo = lb.select(past, lo, arith::AddIOp::create(b, mid, lb.index(1)));
  }
  return lo;
}

/// The receive row at position `k` (i32) of expert `e`'s current rows,
/// region (e, 0) to (e, W-1) in turn: the region where k falls below its
/// count, walking the W counts; `sentinel` where k is past them (padding).
Value findRow(LoopBuilder &lb, const ReceiveLayout &layout, Value counts,
              Value e, Value k, Value sentinel) {
  ImplicitLocOpBuilder &b = lb.b;
  return lb.loop(
      lb.index(0), lb.index(layout.world), {k, sentinel},
      [&](Value src, ValueRange carried) -> SmallVector<Value> {
        Value remaining = carried[0];
        Value current = layout.current(lb, lb.load(counts, {e, src}));
        // Unsigned: once past the region that holds k, remaining < 0.
        Value here = lb.cmpi(arith::CmpIPredicate::ult, remaining, current);
        Value row = lb.toI32(layout.row(lb, e, src, lb.toIndex(remaining)));
        return {arith::SubIOp::create(b, remaining, current),
                lb.select(here, row, carried[1])};
      })[1];
}

/// The one-block kernel `name` of moe_ep_signal and moe_ep_wait: a thread
/// per rank of `world`, the peers' `flags` its first argument, then those
/// `addArgs` adds. A diagnostic on `op` when the world needs more threads
/// than a block of them holds, or the flags are no exchange buffer.
FailureOr<gpu::GPUFuncOp>
createFlagsKernel(PlanBuilder &plan, OpBuilder &builder, Operation *op,
                  int64_t world, Value flags, StringRef name,
                  function_ref<void(KernelArgList &)> addArgs) {
  if (world > kMaxFlagRanks)
    return op->emitOpError() << "has no GPU lowering for more than "
                             << kMaxFlagRanks << " ranks (one thread each)";
  FailureOr<unsigned> exchange = plan.useExchange(op, flags);
  if (failed(exchange))
    return failure();
  KernelArgList args;
  args.add(KernelArg::peers(*exchange));
  addArgs(args);
  return plan.createKernel(builder, op->getLoc(), name, args.get(),
                           {PlanBuilder::constant(1), PlanBuilder::constant(1),
                            PlanBuilder::constant(1)},
                           {world, 1, 1});
}

/// Records in `status` (memref<2xi32>) that `phase` gave up waiting for
/// source `source`, unless an earlier wait recorded a failure: the first
/// thread to claim status[0] stores source + 1 into status[1].
void recordMissing(LoopBuilder &lb, Value status, int64_t phase, Value source) {
  ImplicitLocOpBuilder &b = lb.b;
  auto claim =
      memref::GenericAtomicRMWOp::create(b, status, ValueRange{lb.index(0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&claim.getAtomicBody().front());
    Value current = claim.getCurrentValue();
    Value unset = lb.cmpi(arith::CmpIPredicate::eq, current, lb.i32(0));
    memref::AtomicYieldOp::create(b, lb.select(unset, lb.i32(phase), current));
  }
  lb.ifThen(lb.cmpi(arith::CmpIPredicate::eq, claim.getResult(), lb.i32(0)),
            [&] {
              lb.store(lb.toI32(arith::AddIOp::create(b, source, lb.index(1))),
                       status, lb.index(1));
            });
}

} // namespace

LogicalResult mlir::moe::detail::emitEpDispatch(PlanBuilder &plan,
                                                OpBuilder &builder,
                                                EpDispatchOp op) {
  OpBuilder::InsertionGuard guard(builder);
  ExpertParallelAttr parallel = op.getExpertParallel();
  auto countsType = cast<RankedTensorType>(op.getRecvCounts().getType());
  auto rowsType = cast<RankedTensorType>(op.getRecvRows().getType());
  auto idsType = cast<RankedTensorType>(op.getIds().getType());
  int64_t world = parallel.getWorld(), local = countsType.getDimSize(1);
  ReceiveLayout layout{local, parallel.getLocalExperts(op.getNumExperts()),
                       world, rowsType.getDimSize(1) / (local * world)};

  KernelArgList args;
  unsigned hiddenArg = args.add(plan.use(op.getHiddenStates()));
  unsigned idsArg = args.add(plan.use(op.getIds()));
  unsigned weightsArg = args.add(plan.use(op.getWeights()));
  SmallVector<unsigned> peerArgs;
  Value updated[] = {op.getRecvRows(), op.getRecvWeights(), op.getRecvSlots(),
                     op.getRecvCounts()};
  for (auto [operand, result] : llvm::zip_equal(updated, op->getResults())) {
    FailureOr<unsigned> buffer = plan.useExchange(op, operand);
    if (failed(buffer))
      return failure();
    plan.alias(result, operand);
    peerArgs.push_back(args.add(KernelArg::peers(*buffer)));
  }
  gpu::GPUFuncOp kernel =
      plan.createKernel(builder, op.getLoc(), "moe_ep_dispatch", args.get(),
                        warpGrid(world * local), {kExchangeThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value region = globalWarp(wb);
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, region, wb.index(world * local)),
            [&] {
              Value d = arith::DivUIOp::create(b, region, wb.index(local));
              Value e = arith::RemUIOp::create(b, region, wb.index(local));
              auto peer = [&](unsigned position, Type element) {
                return PeerSlice::of(b, kernel.getArgument(peerArgs[position]),
                                     d, element);
              };
              DispatchRegion dispatch{layout,
                                      static_cast<int64_t>(op.getNumExperts()),
                                      idsType.getDimSize(1),
                                      idsType.getDimSize(0),
                                      parallel.getRank(),
                                      kernel.getArgument(hiddenArg),
                                      kernel.getArgument(idsArg),
                                      kernel.getArgument(weightsArg),
                                      peer(0, rowsType.getElementType()),
                                      peer(1, b.getF32Type()),
                                      peer(2, b.getI32Type()),
                                      peer(3, b.getI32Type()),
                                      RowCopy::of(rowsType.getElementType(),
                                                  rowsType.getDimSize(2))};
              emitDispatchRegion(wb, dispatch, d, e);
            });
  return success();
}

LogicalResult mlir::moe::detail::emitEpRoute(PlanBuilder &plan,
                                             OpBuilder &builder, EpRouteOp op) {
  OpBuilder::InsertionGuard guard(builder);
  auto countsType = cast<RankedTensorType>(op.getCounts().getType());
  int64_t local = countsType.getDimSize(0), world = countsType.getDimSize(1);
  if (local > kEpRouteThreads)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kEpRouteThreads << " local experts";
  int64_t blockM = op.getBlockM();
  int64_t positions =
      cast<RankedTensorType>(op.getSortedIds().getType()).getDimSize(0);
  int64_t rows = positions - local * (blockM - 1);
  ReceiveLayout layout{local, /*routedLocal=*/0, world, rows / (local * world)};

  KernelArgList args;
  unsigned countsArg = args.add(plan.use(op.getCounts()));
  unsigned sortedArg = args.add(plan.define(
      op.getSortedIds(), "ep_sorted_ids", {PlanBuilder::constant(positions)}));
  unsigned expertsArg = args.add(plan.define(
      op.getExpertIds(), "ep_expert_ids",
      {PlanBuilder::constant(llvm::divideCeil(positions, blockM))}));
  unsigned paddedArg =
      args.add(plan.define(op.getNumPadded(), "ep_num_padded", {}));
  // Each block scans the counts (L*W loads, from L2) and places its share
  // of the positions, grid-stride.
  int64_t grid = std::min<int64_t>(llvm::divideCeil(positions, kEpRouteThreads),
                                   plan.numSMs);
  Type i32 = builder.getI32Type();
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_ep_route", args.get(),
      {PlanBuilder::constant(grid), PlanBuilder::constant(1),
       PlanBuilder::constant(1)},
      {kEpRouteThreads, 1, 1}, {workgroupMemRef({kEpRouteThreads}, i32)});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder lb{b};
  Value counts = kernel.getArgument(countsArg);
  Value ends = kernel.getWorkgroupAttributions()[0];
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);

  // Thread e < L: its expert's current rows over the W regions, padded to
  // whole blocks; the scan ends expert e's blocks at ends[e].
  Value isExpert = lb.cmpi(arith::CmpIPredicate::ult, tid, lb.index(local));
  Value expert = lb.select(isExpert, tid, lb.index(0));
  Value total = lb.loop(
      lb.index(0), lb.select(isExpert, lb.index(world), lb.index(0)),
      {lb.i32(0)}, [&](Value src, ValueRange carried) -> SmallVector<Value> {
        Value current = layout.current(lb, lb.load(counts, {expert, src}));
        return {arith::AddIOp::create(b, carried[0], current)};
      })[0];
  Value blockRows = lb.i32(blockM);
  Value padded = arith::MulIOp::create(
      b, arith::CeilDivUIOp::create(b, total, blockRows), blockRows);
  blockInclusiveSum(lb, ends, tid, padded, kEpRouteThreads);
  Value numPadded = lb.load(ends, lb.index(kEpRouteThreads - 1));
  Value first = arith::AndIOp::create(
      b, lb.cmpi(arith::CmpIPredicate::eq, blockId, lb.index(0)),
      lb.cmpi(arith::CmpIPredicate::eq, tid, lb.index(0)));
  lb.ifThen(first,
            [&] { lb.store(numPadded, kernel.getArgument(paddedArg), {}); });

  Value sentinel = lb.i32(rows);
  Value position = arith::AddIOp::create(
      b, arith::MulIOp::create(b, blockId, lb.index(kEpRouteThreads)), tid);
  lb.loop(
      position, lb.index(positions),
      [&](Value p) {
        // Position p's id, and the expert of its block where it starts one.
        auto place = [&](Value id, Value blockExpert) {
          lb.store(id, kernel.getArgument(sortedArg), p);
          Value startsBlock = lb.cmpi(
              arith::CmpIPredicate::eq,
              arith::RemUIOp::create(b, p, lb.index(blockM)), lb.index(0));
          lb.ifThen(startsBlock, [&] {
            Value block = arith::DivUIOp::create(b, p, lb.index(blockM));
            lb.store(blockExpert, kernel.getArgument(expertsArg), block);
          });
        };
        Value pI32 = lb.toI32(p);
        lb.ifThenElse(
            lb.cmpi(arith::CmpIPredicate::slt, pI32, numPadded),
            [&] {
              Value e = findExpert(lb, ends, local, pI32);
              // Expert e's blocks start where expert e - 1's end.
              Value hasLeft =
                  lb.cmpi(arith::CmpIPredicate::ugt, e, lb.index(0));
              Value left = lb.select(
                  hasLeft, arith::SubIOp::create(b, e, lb.index(1)), e);
              Value start = lb.select(hasLeft, lb.load(ends, left), lb.i32(0));
              place(findRow(lb, layout, counts, e,
                            arith::SubIOp::create(b, pI32, start), sentinel),
                    lb.toI32(e));
            },
            [&] { place(sentinel, lb.i32(-1)); });
      },
      grid * kEpRouteThreads);
  return success();
}

LogicalResult mlir::moe::detail::emitEpCombine(PlanBuilder &plan,
                                               OpBuilder &builder,
                                               EpCombineOp op) {
  OpBuilder::InsertionGuard guard(builder);
  auto returnedType = cast<RankedTensorType>(op.getReturned().getType());
  auto countsType = cast<RankedTensorType>(op.getCounts().getType());
  int64_t local = countsType.getDimSize(0), world = countsType.getDimSize(1);
  int64_t capacity = returnedType.getDimSize(1);
  int64_t numSlots = returnedType.getDimSize(2);
  ReceiveLayout layout{local, /*routedLocal=*/0, world, capacity};
  RowCopy copy =
      RowCopy::of(returnedType.getElementType(), returnedType.getDimSize(3));

  KernelArgList args;
  unsigned rowsArg = args.add(plan.use(op.getRows()));
  unsigned slotsArg = args.add(plan.use(op.getSlots()));
  unsigned countsArg = args.add(plan.use(op.getCounts()));
  FailureOr<unsigned> returned = plan.useExchange(op, op.getReturned());
  if (failed(returned))
    return failure();
  plan.alias(op.getOutput(), op.getReturned());
  unsigned returnedArg = args.add(KernelArg::peers(*returned));
  gpu::GPUFuncOp kernel =
      plan.createKernel(builder, op.getLoc(), "moe_ep_combine", args.get(),
                        warpGrid(layout.rows()), {kExchangeThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value row = globalWarp(wb);
  wb.ifThen(
      wb.cmpi(arith::CmpIPredicate::ult, row, wb.index(layout.rows())), [&] {
        Value region = arith::DivUIOp::create(b, row, wb.index(capacity));
        Value i = arith::RemUIOp::create(b, row, wb.index(capacity));
        Value e = arith::DivUIOp::create(b, region, wb.index(world));
        Value src = arith::RemUIOp::create(b, region, wb.index(world));
        Value current = layout.current(
            wb, wb.load(kernel.getArgument(countsArg), {e, src}));
        Value slot = wb.toIndex(wb.load(kernel.getArgument(slotsArg), row));
        Value returned = arith::AndIOp::create(
            b, wb.cmpi(arith::CmpIPredicate::slt, wb.toI32(i), current),
            wb.inRange(slot, wb.index(0), wb.index(capacity * numSlots)));
        wb.ifThen(returned, [&] {
          PeerSlice target = PeerSlice::of(b, kernel.getArgument(returnedArg),
                                           src, copy.element);
          copy.emit(wb, kernel.getArgument(rowsArg), row, target,
                    arith::MulIOp::create(b, slot, wb.index(copy.hidden)));
        });
      });
  return success();
}

LogicalResult mlir::moe::detail::emitEpSignal(PlanBuilder &plan,
                                              OpBuilder &builder,
                                              EpSignalOp op) {
  OpBuilder::InsertionGuard guard(builder);
  ExpertParallelAttr parallel = op.getExpertParallel();
  FailureOr<gpu::GPUFuncOp> kernel = createFlagsKernel(
      plan, builder, op, parallel.getWorld(), op.getFlags(), "moe_ep_signal",
      [&](KernelArgList &) { plan.alias(op.getOutput(), op.getFlags()); });
  if (failed(kernel))
    return failure();
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder lb{b};
  // Thread d: flags[d, R], element R of rank d's slice.
  Value d = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  PeerSlice slice = PeerSlice::of(b, kernel->getArgument(0), d, b.getI32Type());
  // A release: the system-scope fence orders the stores of the kernels
  // before this one, which completed before it in the stream, before the
  // system-scope add. (LLVM's NVPTX back end drops the ordering and scope of
  // an atomicrmw, which would make it a relaxed add at GPU scope.)
  LLVM::FenceOp::create(b, LLVM::AtomicOrdering::acq_rel);
  LLVM::CallIntrinsicOp::create(
      b, b.getI32Type(), b.getStringAttr("llvm.nvvm.atomic.add.gen.i.sys"),
      ValueRange{slice.address(b, lb.index(parallel.getRank())), lb.i32(1)});
  return success();
}

LogicalResult mlir::moe::detail::emitEpWait(PlanBuilder &plan,
                                            OpBuilder &builder, EpWaitOp op) {
  OpBuilder::InsertionGuard guard(builder);
  ExpertParallelAttr parallel = op.getExpertParallel();
  FailureOr<gpu::GPUFuncOp> kernel =
      createFlagsKernel(plan, builder, op, parallel.getWorld(), op.getFlags(),
                        "moe_ep_wait", [&](KernelArgList &args) {
                          args.add(plan.use(op.getStatus()));
                          plan.alias(op.getUpdatedStatus(), op.getStatus());
                          for (auto [ready, guarded] :
                               llvm::zip_equal(op.getReady(), op.getGuarded()))
                            plan.alias(ready, guarded);
                        });
  if (failed(kernel))
    return failure();
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  LoopBuilder lb{b};
  Type i32 = b.getI32Type();
  // This rank's row of the flags is its own slice.
  PeerSlice row = PeerSlice::of(b, kernel->getArgument(0),
                                lb.index(parallel.getRank()), i32);
  auto acquire = [&](Value index) -> Value {
    return LLVM::LoadOp::create(b, i32, row.address(b, index), /*alignment=*/4,
                                /*isVolatile=*/false, /*isNonTemporal=*/false,
                                /*isInvariant=*/false,
                                /*isInvariantGroup=*/false,
                                LLVM::AtomicOrdering::acquire);
  };
  Value epoch = acquire(lb.index(parallel.getRank()));
  // Thread s: until flags[R, s] has caught up with the epoch (counters
  // wrap: behind is a negative difference), or the time is up.
  Value source = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Type i64 = b.getI64Type();
  Value start = NVVM::GlobalTimerOp::create(b, i64);
  auto spin = scf::WhileOp::create(
      b, TypeRange{b.getI1Type()}, ValueRange{},
      [&](OpBuilder &, Location, ValueRange) {
        Value ahead = arith::SubIOp::create(b, acquire(source), epoch);
        Value behind = lb.cmpi(arith::CmpIPredicate::slt, ahead, lb.i32(0));
        Value elapsed = arith::SubIOp::create(
            b, NVVM::GlobalTimerOp::create(b, i64), start);
        Value inTime =
            lb.cmpi(arith::CmpIPredicate::slt, elapsed,
                    arith::ConstantIntOp::create(b, i64, kEpWaitTimeoutNs));
        scf::ConditionOp::create(b, arith::AndIOp::create(b, behind, inTime),
                                 ValueRange{behind});
      },
      [&](OpBuilder &, Location, ValueRange) {
        NVVM::NanosleepOp::create(b, lb.i32(kEpWaitSleepNs));
        scf::YieldOp::create(b);
      });
  lb.ifThen(spin.getResult(0), [&] {
    recordMissing(lb, kernel->getArgument(1), op.getPhase(), source);
  });
  return success();
}
