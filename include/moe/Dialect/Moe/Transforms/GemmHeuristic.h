//===- GemmHeuristic.h - Default tile configurations ------------*- C++ -*-===//
//
// The configuration a grouped matmul gets when neither its IR nor a tuning
// database gives one, and the tile shapes a configuration means for the
// tensor-core kernel: shared by moe-tile, moe-split-k, moe-tma and
// convert-moe-to-gpu.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_GEMMHEURISTIC_H
#define MOE_DIALECT_MOE_TRANSFORMS_GEMMHEURISTIC_H

#include "moe/Dialect/Moe/IR/MoeOps.h"

namespace mlir {
namespace moe {

/// Rows of one wgmma: what one warpgroup of a grouped-matmul block takes.
inline constexpr int64_t kWgmmaRows = 64;

/// Whether a #moe.gemm_config can have `blockM` rows per block (a power of
/// two in [16, 256]).
inline bool isDescribableBlockM(int64_t blockM) {
  return blockM >= 16 && blockM <= 256 && (blockM & (blockM - 1)) == 0;
}

/// Whether the tensor-core (wgmma) kernel can run `op`: 2-byte floats whose
/// rows are the 16-byte multiples TMA and cp.async address, in routing
/// blocks a #moe.gemm_config can describe. moe-tile configures only these;
/// the others lower to the SIMT kernel.
bool hasTensorCoreKernel(GroupedMatmulOp op);

/// Whether the op's fp8 weights are scaled per block (#moe.quantization).
bool hasBlockScales(GroupedMatmulOp op);

/// Whether the op's weights are packed MXFP4, which the tensor-core kernel's
/// producer decodes to the input's type in shared memory.
bool hasPackedWeights(GroupedMatmulOp op);

/// The element type the tensor cores multiply: the weights', or for
/// weight-only quantization (MXFP4) the input's, which they decode to.
Type getTileElementType(GroupedMatmulOp op);

/// Bytes of one element of the tiles the tensor cores multiply.
int64_t getTileElementBytes(GroupedMatmulOp op);

/// Bits the weights store per value (4 for MXFP4, scales aside).
int64_t getWeightBits(GroupedMatmulOp op);

/// Rows of N in each box of the tensor-core kernel's weight tile under
/// `config`: block_n, or block_n / 2 when the epilogue is gated (two boxes,
/// the gate and the up rows).
int64_t getWeightBoxRows(GroupedMatmulOp op, GemmConfigAttr config);

/// The TMA box (outermost first) of the tensor-core kernel's weight loads
/// under `config`: one expert, a weight box's rows (getWeightBoxRows) shared
/// out over the cluster_m blocks that multicast the tile, block_k values of
/// K (block_k / 2 packed MXFP4 bytes).
SmallVector<int64_t> getWeightsTmaBox(GroupedMatmulOp op,
                                      GemmConfigAttr config);

/// The swizzle span of the weights' TMA boxes: the tiles' (packed MXFP4
/// boxes land unswizzled, for the producer to decode).
int64_t getWeightsSwizzleBytes(GroupedMatmulOp op, GemmConfigAttr config);

/// The TMA box of the tensor-core kernel's sorted row tiles: a wgmma's rows
/// per warpgroup, block_k of K.
SmallVector<int64_t> getInputTmaBox(GemmConfigAttr config);

/// The swizzle span of the tensor-core kernel's tiles: one K tile of a row.
int64_t getTileSwizzleBytes(GroupedMatmulOp op, GemmConfigAttr config);

/// Whether `splits` K splits of ceil(steps / splits) K tiles each leave the
/// last split a tile of the `steps`.
inline bool everySplitHasKTile(int64_t steps, int64_t splits) {
  int64_t perSplit = (steps + splits - 1) / splits;
  return (splits - 1) * perSplit < steps;
}

/// Rows per routing block for a layer of `numStoredExperts` experts and
/// `numSlots` slots per token at `tokens` tokens: 128 once the experts
/// average 64 rows (each weight tile then serves twice the rows a 64-row
/// block gives it, in two-warpgroup, 128-row tiles), else 64; with fp8 weights in
/// 128 x 128 blocks (`blockScaled`), 128 unless that pads an average expert
/// by a quarter more than 64 does.
int64_t chooseRoutingBlockM(int64_t tokens, int64_t numSlots,
                            int64_t numStoredExperts, bool blockScaled);

/// Whether `op` at `tokens` tokens streams its weights at about a row per
/// stored expert (decode): each weight tile then serves one block's rows at
/// most, and the GEMM is bound by the weights' bandwidth and by how many
/// blocks stream them at once.
inline bool isWeightStreaming(GroupedMatmulOp op, int64_t tokens) {
  return tokens * static_cast<int64_t>(op.getNumSlots()) <=
         op.getNumStoredExperts();
}

/// The heuristic #moe.gemm_config of `op` for `tokens` tokens on a GPU of
/// `numSMs` multiprocessors (its block_m describable).
GemmConfigAttr chooseGemmConfig(GroupedMatmulOp op, int64_t tokens,
                                int64_t numSMs);

/// The K splits that let `op` under `config` fill `numSMs` multiprocessors
/// at `tokens` tokens, each split keeping at least `num_stages` K tiles and
/// 1 MiB of weights (1 when its tiles fill them already), at most
/// kMaxSplitK. `tokens` must route into kMaxSize rows (MoeLimits.h).
int64_t chooseSplitK(GroupedMatmulOp op, GemmConfigAttr config, int64_t tokens,
                     int64_t numSMs);

} // namespace moe
} // namespace mlir

#endif // MOE_DIALECT_MOE_TRANSFORMS_GEMMHEURISTIC_H
