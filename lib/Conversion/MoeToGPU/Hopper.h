//===- Hopper.h - Hopper (sm_90a) facts the wgmma kernels use ---*- C++ -*-===//
//
// The shared-memory matrix descriptor wgmma reads its operands through, the
// stage and phase arithmetic of an mbarrier-guarded ring of shared-memory
// stages, the accumulator fragment a thread holds after an m64nNk16 wgmma,
// how many blocks a multiprocessor holds, and the loads that take an L2
// cache policy, which nvgpu's ops cannot. Named after the PTX ISA's
// sections, so that each number here can be checked against it.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_CONVERSION_MOETOGPU_HOPPER_H
#define MOE_LIB_CONVERSION_MOETOGPU_HOPPER_H

#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/Target/DefaultTarget.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir {
namespace moe {
namespace detail {

/// Threads of a warpgroup: the four warps that issue one wgmma together.
constexpr int64_t kWarpgroupThreads = 128;
/// Bytes of K of each operand of one wgmma instruction (its M is
/// kWgmmaRows): k16 for bf16/f16, k32 for fp8.
constexpr int64_t kWgmmaKBytes = 32;
/// The swizzle span of the tiles TMA and the row gathers write: a K tile is
/// one 128-byte row per matrix row, and 8 rows form a 1024-byte atom.
constexpr int64_t kSwizzleBytes = 128, kSwizzleAtomBytes = 1024;
/// Bytes of one cp.async row-gather copy.
constexpr int64_t kCopyBytes = 16;

/// The 64-bit descriptor through which wgmma reads a matrix tile from shared
/// memory (PTX ISA, "Matrix Descriptor Format"): the start address and the
/// byte offsets are stored >> 4 in 14-bit fields.
struct SharedMatrixDescriptor {
  /// Bits 16-29: the leading dimension byte offset.
  int64_t leadingByteOffset;
  /// Bits 32-45: the stride byte offset, from one 8-row group to the next.
  int64_t strideByteOffset;
  /// Bits 62-63: the layout (swizzle) type; 1 is the 128-byte swizzle.
  int64_t layoutType;

  /// The descriptor's bits other than the start address.
  int64_t fieldBits() const {
    return ((leadingByteOffset >> 4) << 16) | ((strideByteOffset >> 4) << 32) |
           (layoutType << 62);
  }
  /// The descriptor of the tile at shared address `address` (i64): bits
  /// 0-13 hold address bits 4-17.
  Value build(ImplicitLocOpBuilder &b, Value address) const {
    auto i64 = [&](int64_t value) {
      return arith::ConstantOp::create(b, b.getI64IntegerAttr(value));
    };
    Value start = arith::ShRUIOp::create(
        b, arith::AndIOp::create(b, address, i64(0x3FFFF)), i64(4));
    return arith::OrIOp::create(b, start, i64(fieldBits()));
  }
  /// What adding `bytes` to the tile's address adds to its descriptor (the
  /// start address field; tiles never cross its 256 KiB window).
  static int64_t advance(int64_t bytes) { return bytes >> 4; }
};

/// K-major tiles in the 128-byte swizzle layout, as TMA writes them: 8-row
/// atoms kSwizzleAtomBytes apart; the leading offset is unused by swizzled
/// K-major tiles (1, by convention).
constexpr SharedMatrixDescriptor kSwizzled128KMajor{
    /*leadingByteOffset=*/16, /*strideByteOffset=*/kSwizzleAtomBytes,
    /*layoutType=*/1};

/// A ring of `stages` shared-memory stages, each guarded by mbarriers, that
/// K tiles fill in order. The K tile at ring count c (counted over all the
/// tiles a block has taken) sits in stage c mod stages, and its barriers are
/// then in phase c / stages, whose parity a wait names.
struct MbarrierRing {
  int64_t stages;

  Value stageOf(LoopBuilder &lb, Value count) const {
    return arith::RemUIOp::create(lb.b, count, lb.index(stages));
  }
  /// The parity (i1) of the phase `round` rounds of the ring after the one
  /// of ring count `count`.
  Value parityOf(LoopBuilder &lb, Value count, int64_t round) const {
    ImplicitLocOpBuilder &b = lb.b;
    Value phase = arith::AddIOp::create(
        b, arith::DivUIOp::create(b, count, lb.index(stages)), lb.index(round));
    return arith::IndexCastOp::create(
        b, b.getI1Type(), arith::RemUIOp::create(b, phase, lb.index(2)));
  }
};

/// The accumulators a thread holds after an m64nNk16 wgmma with an f32
/// result (PTX ISA, "Matrix Fragments for wgmma.mma_async .m64nNk16"): N / 2
/// registers; register 4 j + 2 h + i holds row 16 warp + lane / 4 + 8 h,
/// column 8 j + 2 (lane % 4) + i of the warpgroup's 64 x N tile.
struct AccumulatorFragment {
  /// The register of column block `block` (8 columns), row half `half` (the
  /// thread's row, or the row 8 below), column `i` of the thread's pair.
  static int64_t registerOf(int64_t block, int64_t half, int64_t i) {
    return block * 4 + half * 2 + i;
  }
  /// The thread's first row, 16 `warp` + lane / 4: consumer warpgroup c
  /// (warps 4 c to 4 c + 3) holds rows [64 c, 64 c + 64) of the block.
  static Value laneRow(LoopBuilder &lb, Value warp, Value lane) {
    ImplicitLocOpBuilder &b = lb.b;
    return arith::AddIOp::create(b,
                                 arith::MulIOp::create(b, warp, lb.index(16)),
                                 arith::DivUIOp::create(b, lane, lb.index(4)));
  }
  /// The thread's first column in each column block, 2 (lane % 4).
  static Value laneColumn(LoopBuilder &lb, Value lane) {
    ImplicitLocOpBuilder &b = lb.b;
    return arith::MulIOp::create(
        b, arith::RemUIOp::create(b, lane, lb.index(4)), lb.index(2));
  }
};

/// The L2 cache policy (PTX ISA, "createpolicy") under which the lines an
/// access brings in are evicted after those that accesses without a policy
/// bring in: evict_last, for all of them (fraction 1.0). An i64.
inline Value evictLastPolicy(ImplicitLocOpBuilder &b) {
  return NVVM::InlinePtxOp::create(
             b, TypeRange{b.getI64Type()}, ValueRange{}, ValueRange{},
             "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;", Value())
      .getResult(0);
}

/// cp.async.cg of kCopyBytes from global address `source` to shared
/// address `target` (both i64), of which `size` (i32) are read and the rest
/// zero-filled, its L2 lines under `policy`. The shared address goes through
/// a generic one and back inside the instruction's block: given it
/// directly, ptxas (CUDA 13.0) splits it into a register plus the ring's
/// base in a uniform register, and encodes that LDGSTS with its policy in
/// the next uniform register (`[R11+UR0], desc[UR1]`), which the H100 runs
/// as an illegal instruction.
inline void copyAsync(ImplicitLocOpBuilder &b, Value target, Value source,
                      Value size, Value policy) {
  static_assert(kCopyBytes == 16, "the instruction below copies 16 bytes");
  NVVM::InlinePtxOp::create(
      b, TypeRange{}, ValueRange{target, source, size, policy}, ValueRange{},
      "{ .reg .b64 generic, shared; cvta.shared.u64 generic, $0; "
      "cvta.to.shared.u64 shared, generic; "
      "cp.async.cg.shared.global.L2::cache_hint [shared], [$1], 16, $2, $3; }",
      Value());
}

/// A TMA load of the box at (`column`, `row`) (i32) of the 2-D tensor map at
/// generic address `map` to shared address `target`, completing its bytes on
/// the mbarrier at shared address `barrier` (all three i64, as copyAsync's
/// shared address), its L2 lines under `policy` (nvgpu's TMA load takes no
/// policy).
inline void loadTile2d(ImplicitLocOpBuilder &b, Value target, Value map,
                       Value column, Value row, Value barrier, Value policy) {
  NVVM::InlinePtxOp::create(
      b, TypeRange{}, ValueRange{target, map, column, row, barrier, policy},
      ValueRange{},
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::"
      "complete_tx::bytes.L2::cache_hint [$0], [$1, {$2, $3}], [$4], $5;",
      Value());
}

/// Blocks of a wgmma kernel a Hopper multiprocessor holds at once: its
/// 228 KiB of shared memory (1 KiB per block reserved), 64 Ki registers
/// (a thread holds block_n / 2 accumulators and about 40 more) and 2048
/// threads.
inline int64_t residentBlocks(int64_t threads, int64_t blockN,
                              int64_t sharedBytes) {
  constexpr int64_t kSharedBytesPerSM = 228 * 1024, kReservedBytes = 1024;
  constexpr int64_t kRegistersPerSM = 64 * 1024, kThreadsPerSM = 2048;
  int64_t registersPerThread = std::min<int64_t>(255, blockN / 2 + 40);
  return std::max<int64_t>(
      1, std::min({kSharedBytesPerSM / (sharedBytes + kReservedBytes),
                   kRegistersPerSM / (threads * registersPerThread),
                   kThreadsPerSM / threads}));
}

} // namespace detail
} // namespace moe
} // namespace mlir

#endif // MOE_LIB_CONVERSION_MOETOGPU_HOPPER_H
