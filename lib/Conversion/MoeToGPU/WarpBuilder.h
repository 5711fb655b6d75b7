//===- WarpBuilder.h - Warp-level kernel building helpers -------*- C++ -*-===//
//
// Shuffles, warp reductions, the order-preserving keys of router scores and
// a block-wide scan: what the gate, route and combine kernels build on top
// of LoopBuilder.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_CONVERSION_MOETOGPU_WARPBUILDER_H
#define MOE_LIB_CONVERSION_MOETOGPU_WARPBUILDER_H

#include "moe/Conversion/MoeCommon/LoopBuilder.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir {
namespace moe {
namespace detail {

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
  /// larger scores give larger keys, NaN gives 1 (below every number, above
  /// none's 0: an eligible NaN still outranks no candidate at all), and -0
  /// and +0 give one key, as they tie in the op's order.
  Value orderedKey(Value value) {
    Value canonical = arith::AddFOp::create(b, value, f32(0.0)); // -0 -> +0
    Value bits = arith::BitcastOp::create(b, b.getI32Type(), canonical);
    Value positive = cmpi(arith::CmpIPredicate::sge, bits, i32(0));
    Value ordered =
        select(positive, arith::XOrIOp::create(b, bits, i32(INT32_MIN)),
               arith::XOrIOp::create(b, bits, i32(-1)));
    return select(isNaN(value), i32(1), ordered);
  }
  /// The score of a key (NaN for 0 and 1).
  Value scoreOfKey(Value key) {
    Value wasPositive = cmpi(arith::CmpIPredicate::slt, key, i32(0));
    Value bits =
        select(wasPositive, arith::XOrIOp::create(b, key, i32(INT32_MIN)),
               arith::XOrIOp::create(b, key, i32(-1)));
    return arith::BitcastOp::create(b, b.getF32Type(), bits);
  }

  /// An expert in the running for selection: its key and id. "None" is
  /// (0, INT32_MAX), below every candidate, NaN ones included: numbers' keys
  /// are at least 0x7fffff, NaN's is 1.
  struct Candidate {
    Value key, expert;
  };
  Candidate none() { return {i32(0), i32(INT32_MAX)}; }
  /// `cond ? ifTrue : ifFalse`, key and expert alike.
  Candidate selectCandidate(Value cond, Candidate ifTrue, Candidate ifFalse) {
    return {select(cond, ifTrue.key, ifFalse.key),
            select(cond, ifTrue.expert, ifFalse.expert)};
  }
  /// Whether `condition` (i1) holds in any lane of the warp.
  Value any(Value condition) {
    return NVVM::VoteSyncOp::create(b, b.getI1Type(), i32(-1), condition,
                                    NVVM::VoteSyncKind::any);
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

/// The inclusive sum of the i32 `value` of threads 0 .. `tid` of the block
/// of `threads` threads (a multiple of the warp size, at most a warp of
/// warps), in `scan`, a shared buffer of `threads` i32 that then holds every
/// thread's sum: each warp scans its lanes by shuffles, warp 0 scans the
/// warps' totals, and each thread adds the totals of the warps before its
/// own. Four barriers, where a scan through shared memory alone takes two
/// per doubling step (20 for 1024 threads, which cost the decode route's
/// single-block scan kernel microseconds).
inline Value blockInclusiveSum(LoopBuilder &lb, Value scan, Value tid,
                               Value value, int64_t threads) {
  ImplicitLocOpBuilder &b = lb.b;
  auto warpInclusiveSum = [&](Value lane, Value x) {
    for (int64_t distance = 1; distance < kWarpSize; distance *= 2) {
      Value left = gpu::ShuffleOp::create(b, x, static_cast<int32_t>(distance),
                                          static_cast<int32_t>(kWarpSize),
                                          gpu::ShuffleMode::UP)
                       .getShuffleResult();
      Value hasLeft =
          lb.cmpi(arith::CmpIPredicate::uge, lane, lb.index(distance));
      x = arith::AddIOp::create(b, x, lb.select(hasLeft, left, lb.i32(0)));
    }
    return x;
  };
  Value lane = arith::RemUIOp::create(b, tid, lb.index(kWarpSize));
  Value warp = arith::DivUIOp::create(b, tid, lb.index(kWarpSize));
  Value sum = warpInclusiveSum(lane, value);
  lb.ifThen(lb.cmpi(arith::CmpIPredicate::eq, lane, lb.index(kWarpSize - 1)),
            [&] { lb.store(sum, scan, warp); });
  gpu::BarrierOp::create(b);
  lb.ifThen(lb.cmpi(arith::CmpIPredicate::eq, warp, lb.index(0)), [&] {
    // Each lane reads its own entry (lanes past the warps' count read one
    // that holds no total and drop it), so that no lane reads an entry that
    // another lane of the warp writes next.
    Value isWarp =
        lb.cmpi(arith::CmpIPredicate::ult, lane, lb.index(threads / kWarpSize));
    Value total = lb.select(isWarp, lb.load(scan, lane), lb.i32(0));
    lb.store(warpInclusiveSum(lane, total), scan, lane);
  });
  gpu::BarrierOp::create(b);
  Value hasBefore = lb.cmpi(arith::CmpIPredicate::ugt, warp, lb.index(0));
  Value before = lb.load(
      scan, lb.select(hasBefore, arith::SubIOp::create(b, warp, lb.index(1)),
                      lb.index(0)));
  sum = arith::AddIOp::create(b, sum, lb.select(hasBefore, before, lb.i32(0)));
  gpu::BarrierOp::create(b);
  lb.store(sum, scan, tid);
  gpu::BarrierOp::create(b);
  return sum;
}

inline WarpBuilder makeWarpBuilder(ImplicitLocOpBuilder &b) {
  WarpBuilder wb{{b}, Value(), Value()};
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  wb.lane = arith::RemUIOp::create(b, tid, wb.index(kWarpSize));
  wb.laneI32 = wb.toI32(wb.lane);
  return wb;
}

} // namespace detail
} // namespace moe
} // namespace mlir

#endif // MOE_LIB_CONVERSION_MOETOGPU_WARPBUILDER_H
