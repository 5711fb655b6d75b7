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
/// A block of moe_ep_dispatch: a slot per thread in each round.
constexpr int64_t kDispatchThreads = 256;
constexpr int64_t kDispatchWarps = kDispatchThreads / kWarpSize;
/// The most blocks (parts of the slots) of one region of moe_ep_dispatch.
/// Each counts the region's slots before its part, so more parts read the
/// ids more often; 32 keep DeepSeek-V3's shared region at T = 4096 (4096
/// rows a rank) to 128 rows a block.
constexpr int64_t kMaxDispatchParts = 32;
/// Loads a thread issues before it uses them, in the exchange kernels'
/// copies and counts.
constexpr int64_t kCopiesInFlight = 8;
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

/// Rows of H elements copied as vectors of 16 bytes (or the widest that
/// divides H).
struct RowCopy {
  Type element;
  int64_t hidden, width;

  static RowCopy of(Type element, int64_t hidden) {
    int64_t width = 16 / (element.getIntOrFloatBitWidth() / 8);
    while (hidden % width)
      width /= 2;
    return {element, hidden, width};
  }
  int64_t vectorsPerRow() const { return hidden / width; }
  unsigned alignment() const {
    return width * element.getIntOrFloatBitWidth() / 8;
  }
  /// Vector `column` (in vectors) of row `row` of `source`, a `[rows, H]`
  /// memref. Rows start aligned (the runtime checks the bases, H is a
  /// multiple of the width), so the vectors are.
  Value load(LoopBuilder &lb, Value source, Value row, Value column) const {
    ImplicitLocOpBuilder &b = lb.b;
    return vector::LoadOp::create(
        b, VectorType::get({width}, element), source,
        ValueRange{row, arith::MulIOp::create(b, column, lb.index(width))},
        /*nontemporal=*/false, llvm::Align(alignment()));
  }
  /// Stores `vector` as vector `column` of the row that starts at element
  /// `start` of `target`.
  void store(LoopBuilder &lb, Value vector, const PeerSlice &target,
             Value start, Value column) const {
    ImplicitLocOpBuilder &b = lb.b;
    target.store(
        b, vector,
        arith::AddIOp::create(
            b, start, arith::MulIOp::create(b, column, lb.index(width))),
        alignment());
  }
};

/// Copies `items` vectors, this thread those from `first` in steps of
/// `stride`: `load(item)` reads one, `store(item, vector)` writes it.
/// kCopiesInFlight loads are issued before their stores: one at a time, a
/// thread waited a memory latency per 16 bytes (a warp copied 7 GB/s).
void copyItems(LoopBuilder &lb, Value first, int64_t stride, Value items,
               function_ref<Value(Value)> load,
               function_ref<void(Value, Value)> store) {
  ImplicitLocOpBuilder &b = lb.b;
  lb.loop(
      first, items,
      [&](Value base) {
        SmallVector<std::pair<Value, Value>> copies;
        for (int64_t i = 0; i < kCopiesInFlight; ++i) {
          Value item = arith::AddIOp::create(b, base, lb.index(i * stride));
          Value valid = lb.cmpi(arith::CmpIPredicate::ult, item, items);
          Value safe = lb.select(valid, item, base);
          copies.push_back({valid, load(safe)});
        }
        for (int64_t i = 0; i < kCopiesInFlight; ++i) {
          lb.ifThen(copies[i].first, [&] {
            store(arith::AddIOp::create(b, base, lb.index(i * stride)),
                  copies[i].second);
          });
        }
      },
      stride * kCopiesInFlight);
}

/// A grid of `blocks` blocks.
SmallVector<SizeExpr> blockGrid(int64_t blocks) {
  return {PlanBuilder::constant(blocks), PlanBuilder::constant(1),
          PlanBuilder::constant(1)};
}

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
  return blockGrid(llvm::divideCeil(items, kExchangeWarps));
}

/// How moe_ep_dispatch divides its slots: the T*S slots in rounds of a
/// slot per thread, each region's rounds in `parts` runs of
/// `roundsPerPart`, a block each.
struct DispatchParts {
  int64_t slots, rounds, parts, roundsPerPart;

  static DispatchParts of(int64_t slots) {
    int64_t rounds = llvm::divideCeil(slots, kDispatchThreads);
    int64_t parts = std::min(rounds, kMaxDispatchParts);
    return {slots, rounds, parts,
            static_cast<int64_t>(llvm::divideCeil(rounds, parts))};
  }
};

/// The operands of the dispatch kernel of one region.
struct DispatchRegion {
  const ReceiveLayout &layout;
  DispatchParts parts;
  int64_t numExperts, numSlots, rank;
  Value hidden, ids, weights;
  PeerSlice rows, routedWeights, slots, counts;
  RowCopy copy;
  /// Workgroup memory: a round's matching slots in order, and each warp's
  /// count of them.
  Value matches, warpCounts;
};

/// The expert whose rows region (d, e) of rank d's buffer receives from
/// this rank: routed expert d * E/W + e, or on this rank the shared expert
/// E + e - E/W; -1 (none) for a shared region of another rank.
Value regionExpert(WarpBuilder &wb, const DispatchRegion &region, Value d,
                   Value e) {
  ImplicitLocOpBuilder &b = wb.b;
  const ReceiveLayout &layout = region.layout;
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
  return wb.select(receives, expert, wb.i32(-1));
}

/// Whether slot `slot` (index) exists and is routed to `expert`.
Value routedTo(WarpBuilder &wb, const DispatchRegion &region, Value slot,
               Value expert) {
  ImplicitLocOpBuilder &b = wb.b;
  Value inRange =
      wb.cmpi(arith::CmpIPredicate::ult, slot, wb.index(region.parts.slots));
  Value safe = wb.select(inRange, slot, wb.index(0));
  Value id = wb.load(
      region.ids, {arith::DivUIOp::create(b, safe, wb.index(region.numSlots)),
                   arith::RemUIOp::create(b, safe, wb.index(region.numSlots))});
  return arith::AndIOp::create(b, inRange,
                               wb.cmpi(arith::CmpIPredicate::eq, id, expert));
}

/// The sums over the block of each warp's `count` (uniform over the warp):
/// {those of the warps before `warp`, all of them}, through `warpCounts`.
/// The caller barriers before the counts are stored again.
std::pair<Value, Value> sumOverWarps(WarpBuilder &wb, Value warpCounts,
                                     Value warp, Value count) {
  ImplicitLocOpBuilder &b = wb.b;
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)),
            [&] { wb.store(count, warpCounts, warp); });
  gpu::BarrierOp::create(b);
  SmallVector<Value> sums =
      wb.loop(wb.index(0), wb.index(kDispatchWarps), {wb.i32(0), wb.i32(0)},
              [&](Value w, ValueRange carried) -> SmallVector<Value> {
                Value each = wb.load(warpCounts, w);
                Value before = wb.cmpi(arith::CmpIPredicate::ult, w, warp);
                return {arith::AddIOp::create(
                            b, carried[0], wb.select(before, each, wb.i32(0))),
                        arith::AddIOp::create(b, carried[1], each)};
              });
  return {sums[0], sums[1]};
}

/// The block's count of the slots before `end` (index) routed to `expert`:
/// each thread counts a slot per kDispatchThreads, kCopiesInFlight loads at
/// a time.
Value countBefore(WarpBuilder &wb, const DispatchRegion &region, Value tid,
                  Value end, Value expert) {
  ImplicitLocOpBuilder &b = wb.b;
  int64_t step = kDispatchThreads * kCopiesInFlight;
  Value count = wb.loop(
      tid, end, {wb.i32(0)},
      [&](Value base, ValueRange carried) -> SmallVector<Value> {
        Value sum = carried[0];
        for (int64_t i = 0; i < kCopiesInFlight; ++i) {
          Value slot =
              arith::AddIOp::create(b, base, wb.index(i * kDispatchThreads));
          Value counted = arith::AndIOp::create(
              b, wb.cmpi(arith::CmpIPredicate::ult, slot, end),
              routedTo(wb, region, slot, expert));
          sum = arith::AddIOp::create(
              b, sum, arith::ExtUIOp::create(b, b.getI32Type(), counted));
        }
        return {sum};
      },
      step)[0];
  Value warp = arith::DivUIOp::create(b, tid, wb.index(kWarpSize));
  Value total = sumOverWarps(wb, region.warpCounts, warp,
                             wb.redux(NVVM::ReduxKind::ADD, count))
                    .second;
  gpu::BarrierOp::create(b);
  return total;
}

/// Sends the `count` rows of `region.matches`, the matching slots of a round
/// in order, to positions `first`, `first` + 1, ... of region (d, e) of
/// rank d's buffer (those below C): the block's threads copy 16 bytes each
/// at a time, and the thread of each row's first vector stores its routed
/// weight and slot.
void sendMatches(WarpBuilder &wb, const DispatchRegion &region, Value tid,
                 Value e, Value first, Value count) {
  ImplicitLocOpBuilder &b = wb.b;
  const RowCopy &copy = region.copy;
  Value vectors = wb.index(copy.vectorsPerRow());
  // Vector `item` of the listed rows: its row's index in the list, its
  // column (in vectors) and its slot.
  struct Located {
    Value index, column, slot;
  };
  auto locate = [&](Value item) {
    Value index = arith::DivUIOp::create(b, item, vectors);
    return Located{index, arith::RemUIOp::create(b, item, vectors),
                   wb.toIndex(wb.load(region.matches, index))};
  };
  auto tokenOf = [&](Value slot) {
    return arith::DivUIOp::create(b, slot, wb.index(region.numSlots));
  };
  copyItems(
      wb, tid, kDispatchThreads,
      arith::MulIOp::create(b, wb.toIndex(count), vectors),
      [&](Value item) {
        Located at = locate(item);
        return copy.load(wb, region.hidden, tokenOf(at.slot), at.column);
      },
      [&](Value item, Value vector) {
        Located at = locate(item);
        Value position = arith::AddIOp::create(b, first, wb.toI32(at.index));
        wb.ifThen(
            wb.cmpi(arith::CmpIPredicate::slt, position,
                    wb.i32(region.layout.capacity)),
            [&] {
              Value row = region.layout.row(wb, e, wb.index(region.rank),
                                            wb.toIndex(position));
              copy.store(wb, vector, region.rows,
                         arith::MulIOp::create(b, row, wb.index(copy.hidden)),
                         at.column);
              Value rowFirst =
                  wb.cmpi(arith::CmpIPredicate::eq, at.column, wb.index(0));
              wb.ifThen(rowFirst, [&] {
                Value s = arith::RemUIOp::create(b, at.slot,
                                                 wb.index(region.numSlots));
                region.routedWeights.store(
                    b, wb.load(region.weights, {tokenOf(at.slot), s}), row);
                region.slots.store(b, wb.toI32(at.slot), row);
              });
            });
      });
}

/// One round of a dispatch block: its slots `round` * kDispatchThreads + tid
/// routed to `expert`, found by a ballot a warp, listed in slot order in
/// `region.matches` and sent from position `sent` on. Returns the rows sent
/// and listed, `sent` plus the round's count.
Value dispatchRound(WarpBuilder &wb, const DispatchRegion &region, Value tid,
                    Value e, Value expert, Value round, Value sent) {
  ImplicitLocOpBuilder &b = wb.b;
  Value warp = arith::DivUIOp::create(b, tid, wb.index(kWarpSize));
  Value slot = arith::AddIOp::create(
      b, arith::MulIOp::create(b, round, wb.index(kDispatchThreads)), tid);
  Value match = routedTo(wb, region, slot, expert);
  Value mask = NVVM::VoteSyncOp::create(b, b.getI32Type(), wb.i32(-1), match,
                                        NVVM::VoteSyncKind::ballot);
  // The matches of the warps before this one, and of the whole round.
  std::pair<Value, Value> sums =
      sumOverWarps(wb, region.warpCounts, warp, LLVM::CtPopOp::create(b, mask));
  Value earlier = sums.first, roundMatches = sums.second;
  Value lanesBelow = arith::SubIOp::create(
      b, arith::ShLIOp::create(b, wb.i32(1), wb.laneI32), wb.i32(1));
  Value below =
      LLVM::CtPopOp::create(b, arith::AndIOp::create(b, mask, lanesBelow));
  Value listed = wb.toIndex(arith::AddIOp::create(b, earlier, below));
  wb.ifThen(match, [&] { wb.store(wb.toI32(slot), region.matches, listed); });
  gpu::BarrierOp::create(b);
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::sgt, roundMatches, wb.i32(0)),
            [&] { sendMatches(wb, region, tid, e, sent, roundMatches); });
  // The next round lists its matches over these.
  gpu::BarrierOp::create(b);
  return arith::AddIOp::create(b, sent, roundMatches);
}

/// The body of the dispatch block of part `part` of region (d, e) of rank
/// d's buffer from this rank: it counts the region's slots before the part,
/// sends the part's in rounds, in slot order, and the last part stores the
/// region's count.
void emitDispatchPart(WarpBuilder &wb, const DispatchRegion &region, Value d,
                      Value e, Value part) {
  ImplicitLocOpBuilder &b = wb.b;
  const DispatchParts &parts = region.parts;
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value expert = regionExpert(wb, region, d, e);
  Value firstRound =
      arith::MulIOp::create(b, part, wb.index(parts.roundsPerPart));
  Value endRound = arith::MinUIOp::create(
      b, arith::AddIOp::create(b, firstRound, wb.index(parts.roundsPerPart)),
      wb.index(parts.rounds));
  Value before = countBefore(
      wb, region, tid,
      arith::MulIOp::create(b, firstRound, wb.index(kDispatchThreads)), expert);
  Value count = wb.loop(
      firstRound, endRound, {before},
      [&](Value round, ValueRange carried) -> SmallVector<Value> {
        return {dispatchRound(wb, region, tid, e, expert, round, carried[0])};
      })[0];
  // Every count of this rank, 0 included: nothing clears the buffers.
  Value last = arith::AndIOp::create(
      b, wb.cmpi(arith::CmpIPredicate::eq, part, wb.index(parts.parts - 1)),
      wb.cmpi(arith::CmpIPredicate::eq, tid, wb.index(0)));
  wb.ifThen(last, [&] {
    Value index = arith::AddIOp::create(
        b, arith::MulIOp::create(b, e, wb.index(region.layout.world)),
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
  DispatchParts parts =
      DispatchParts::of(idsType.getDimSize(0) * idsType.getDimSize(1));

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
  Type i32 = builder.getI32Type();
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_ep_dispatch", args.get(),
      blockGrid(world * local * parts.parts), {kDispatchThreads, 1, 1},
      {workgroupMemRef({kDispatchThreads}, i32),
       workgroupMemRef({kDispatchWarps}, i32)});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value region = arith::DivUIOp::create(b, blockId, wb.index(parts.parts));
  Value part = arith::RemUIOp::create(b, blockId, wb.index(parts.parts));
  Value d = arith::DivUIOp::create(b, region, wb.index(local));
  Value e = arith::RemUIOp::create(b, region, wb.index(local));
  auto peer = [&](unsigned position, Type element) {
    return PeerSlice::of(b, kernel.getArgument(peerArgs[position]), d, element);
  };
  DispatchRegion dispatch{
      layout,
      parts,
      static_cast<int64_t>(op.getNumExperts()),
      idsType.getDimSize(1),
      parallel.getRank(),
      kernel.getArgument(hiddenArg),
      kernel.getArgument(idsArg),
      kernel.getArgument(weightsArg),
      peer(0, rowsType.getElementType()),
      peer(1, b.getF32Type()),
      peer(2, i32),
      peer(3, i32),
      RowCopy::of(rowsType.getElementType(), rowsType.getDimSize(2)),
      kernel.getWorkgroupAttributions()[0],
      kernel.getWorkgroupAttributions()[1]};
  emitDispatchPart(wb, dispatch, d, e, part);
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
          Value start = arith::MulIOp::create(b, slot, wb.index(copy.hidden));
          copyItems(
              wb, wb.lane, kWarpSize, wb.index(copy.vectorsPerRow()),
              [&](Value column) {
                return copy.load(wb, kernel.getArgument(rowsArg), row, column);
              },
              [&](Value column, Value vector) {
                copy.store(wb, vector, target, start, column);
              });
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
