//===- GemmHeuristic.cpp - Default tile configurations --------------------===//

#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"

#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::moe;

/// The K tile spans the 128-byte swizzle of the shared-memory tiles.
static constexpr int64_t kSwizzleBytes = 128;
/// From this many tokens on, tiles of 256 accumulator columns (half the A
/// traffic per flop) beat 128 on the H100/H200 (bench/RESULTS.md).
static constexpr int64_t kWideTileTokens = 256;
/// Weight bytes a K split must stream at least: below it the second launch
/// and the partial sums cost more than the extra multiprocessors gain.
static constexpr int64_t kMinSplitWeightBytes = 1 << 20;

bool mlir::moe::hasTensorCoreKernel(GroupedMatmulOp op) {
  Type elementType = getTileElementType(op);
  constexpr int64_t kCopyBytes = 16;
  // MXFP4 decodes to bf16: e2m1 values times any e8m0 scale are bf16s,
  // not always f16s.
  bool multiplied = hasPackedWeights(op)
                        ? elementType.isBF16()
                        : elementType.isBF16() || elementType.isF16() ||
                              isa<Float8E4M3FNType>(elementType);
  return multiplied &&
         op.getReductionSize() * getWeightBits(op) / 8 % kCopyBytes == 0 &&
         op.getReductionSize() * getTileElementBytes(op) % kCopyBytes == 0 &&
         isDescribableBlockM(op.getBlockM());
}

bool mlir::moe::hasBlockScales(GroupedMatmulOp op) {
  QuantizationAttr quantization = op.getQuantizationAttr();
  return quantization && quantization.getWeights() == WeightScaling::block;
}

bool mlir::moe::hasPackedWeights(GroupedMatmulOp op) {
  QuantizationAttr quantization = op.getQuantizationAttr();
  return quantization && quantization.getWeights() == WeightScaling::mxfp4;
}

Type mlir::moe::getTileElementType(GroupedMatmulOp op) {
  QuantizationAttr quantization = op.getQuantizationAttr();
  return getElementTypeOrSelf(quantization && quantization.isWeightOnly()
                                  ? op.getInput().getType()
                                  : op.getWeights().getType());
}

int64_t mlir::moe::getTileElementBytes(GroupedMatmulOp op) {
  return getTileElementType(op).getIntOrFloatBitWidth() / 8;
}

int64_t mlir::moe::getWeightBits(GroupedMatmulOp op) {
  QuantizationAttr quantization = op.getQuantizationAttr();
  return op.getWeightsType().getElementTypeBitWidth() /
         (quantization ? quantization.getWeightPacking() : 1);
}

int64_t mlir::moe::getWeightBoxRows(GroupedMatmulOp op, GemmConfigAttr config) {
  return op.isGated() ? config.getBlockN() / 2 : config.getBlockN();
}

SmallVector<int64_t> mlir::moe::getWeightsTmaBox(GroupedMatmulOp op,
                                                 GemmConfigAttr config) {
  return {1, getWeightBoxRows(op, config) / config.getClusterM(),
          config.getBlockK() * getWeightBits(op) /
              op.getWeightsType().getElementTypeBitWidth()};
}

SmallVector<int64_t> mlir::moe::getInputTmaBox(GemmConfigAttr config) {
  return {config.getNumWarpgroups() * kWgmmaRows, config.getBlockK()};
}

int64_t mlir::moe::getTileSwizzleBytes(GroupedMatmulOp op,
                                       GemmConfigAttr config) {
  return config.getBlockK() * getTileElementBytes(op);
}

int64_t mlir::moe::getWeightsSwizzleBytes(GroupedMatmulOp op,
                                          GemmConfigAttr config) {
  return hasPackedWeights(op) ? 0 : getTileSwizzleBytes(op, config);
}

int64_t mlir::moe::chooseRoutingBlockM(int64_t tokens, int64_t numSlots,
                                       int64_t numStoredExperts,
                                       bool blockScaled) {
  // bench/RESULTS.md ("Routing blocks of 64 or 128 rows"): a weight tile
  // serves a block's rows, so 128-row blocks read it half as often once an
  // expert has more than one 64-row block. From 64 rows per expert on they
  // win or tie (Kimi-K2 at T = 4096, 96 rows: 15.8 -> 13.1 ms; DeepSeek-V3
  // at 2048, 72 rows: 9.3 -> 8.3 ms; Mixtral-8x7B at 512, 128 rows: 1441 ->
  // 1259 us; 64 rows: within 1.4 % either way); below, 64-row blocks win
  // (Qwen3-30B-A3B at T = 512, 32 rows: 457 against 470 us).
  if (!blockScaled)
    return tokens * numSlots >= kWgmmaRows * numStoredExperts ? 2 * kWgmmaRows
                                                              : kWgmmaRows;
  // With fp8 block scales, two warpgroups and a producer multiply a row
  // about 1.3x as fast as the 64-row tiles: 128-row blocks win unless they
  // pad an average expert by a quarter more (DeepSeek-V3's experts at
  // T = 2048, 72 rows: 4914 against 5747 us; at 4096, 143 rows: 6714
  // against 6584; Kimi-K2's at 2048, 48 rows: 6932 against 6405).
  int64_t rows = llvm::divideCeil(tokens * numSlots, numStoredExperts);
  int64_t padded = llvm::alignTo(rows, kWgmmaRows);
  int64_t paddedTwice = llvm::alignTo(rows, 2 * kWgmmaRows);
  return 4 * paddedTwice <= 5 * padded ? 2 * kWgmmaRows : kWgmmaRows;
}

/// Tiles of `blockRows` rows x `columnsPerTile` output columns that `op`'s
/// rows at `tokens` tokens fill, spread over the experts that get any, each
/// expert's rows in whole blocks.
static int64_t countTiles(GroupedMatmulOp op, int64_t tokens, int64_t blockRows,
                          int64_t columnsPerTile) {
  int64_t rows = tokens * op.getNumSlots();
  int64_t activeExperts = std::min(op.getNumStoredExperts(), rows);
  int64_t rowBlocks =
      activeExperts *
      llvm::divideCeil(llvm::divideCeil(rows, activeExperts), blockRows);
  return rowBlocks * llvm::divideCeil(op.getOutputColumns(), columnsPerTile);
}

/// Accumulator columns per block: 256 from kWideTileTokens tokens on, 128
/// below and with fp8 block scales (the promotion holds a second set of
/// accumulators); 64 where narrower tiles let more blocks stream the
/// weights.
static int64_t chooseBlockN(GroupedMatmulOp op, int64_t tokens,
                            int64_t numSMs) {
  bool packed = hasPackedWeights(op);
  if (!isWeightStreaming(op, tokens))
    return tokens >= kWideTileTokens && !hasBlockScales(op) && !packed ? 256
                                                                       : 128;
  // MXFP4's producer decodes each weight tile: 64 columns while the weights
  // stream, where twice the blocks decode them (gpt-oss-20b's experts at
  // T = 1: 114 -> 96 us). A gated GEMM whose 128-column tiles would leave
  // multiprocessors without a block streams faster in 64-column ones
  // (Qwen3-30B-A3B's first GEMM at T = 1, 96 tiles on 132 multiprocessors:
  // 36.7 -> 29.2 us). With more tiles it varies: DeepSeek-V3's 288 take 190
  // us at 128 columns, 192-215 at 64; Mixtral-8x7B's 448 take 186 at 128,
  // 171 at 64 (bench/RESULTS.md).
  if (packed)
    return 64;
  // A gated tile of 128 accumulator columns computes 64 output columns.
  bool fewTiles =
      op.isGated() &&
      countTiles(op, tokens, std::min<int64_t>(op.getBlockM(), kWgmmaRows),
                 64) < numSMs;
  return fewTiles ? 64 : 128;
}

/// Whether the blocks of a gathering GEMM fed by a producer warpgroup walk
/// the tiles as a persistent grid: the producer then gathers the next
/// tile's rows while the consumers store the last. Measured on the H100
/// (bench/RESULTS.md), it gains 4-12 % from 1024 tokens for the layers of
/// 8 and 128 experts (Mixtral-8x7B's and Qwen3-30B-A3B's first GEMMs) and
/// loses 1-68 % for those of 256 and 384 (DeepSeek-V3's first GEMM at
/// T = 4096: 7414 -> 12459 us) and for the second GEMMs (1.04-1.06x).
static bool isPersistentGathering(GroupedMatmulOp op, int64_t tokens,
                                  bool producer) {
  constexpr int64_t kPersistentTokens = 1024, kPersistentMaxExperts = 128;
  return producer && op.getInputOrder() == RowOrder::token &&
         !hasPackedWeights(op) && getTileElementBytes(op) == 2 &&
         tokens >= kPersistentTokens &&
         op.getNumStoredExperts() <= kPersistentMaxExperts;
}

/// Whether a bf16/f16 GEMM of long K and few rounds of tiles balances the
/// last round by stream-K (a persistent grid that splits the last round's
/// tiles along K): a round's tiles then take long, and a partial last round
/// leaves most blocks idle. Measured on the H100 (bench/RESULTS.md),
/// Mixtral-8x7B's second GEMM (K = 14336, 224 K tiles) at 1024 and 2048
/// tokens, 2.4 and 4.4 rounds of 256-column tiles on 132 multiprocessors:
/// 547 -> 421 and 810 -> 750 us; at 4096, 8.2 rounds, 1440 -> 1476. The
/// first GEMMs' 32-64 K tiles gained nothing beyond their spread.
static bool isStreamKBalanced(GroupedMatmulOp op, int64_t tokens,
                              int64_t numSMs, int64_t blockN, int64_t blockK,
                              int64_t warpgroups) {
  constexpr int64_t kMinStreamKSteps = 128, kMaxStreamKRounds = 6;
  if (hasPackedWeights(op) || getTileElementBytes(op) != 2 ||
      tokens < kWideTileTokens ||
      llvm::divideCeil(op.getReductionSize(), blockK) < kMinStreamKSteps)
    return false;
  int64_t tiles = countTiles(
      op, tokens, std::min<int64_t>(op.getBlockM(), kWgmmaRows * warpgroups),
      op.isGated() ? blockN / 2 : blockN);
  return tiles > numSMs && tiles < kMaxStreamKRounds * numSMs;
}

GemmConfigAttr mlir::moe::chooseGemmConfig(GroupedMatmulOp op, int64_t tokens,
                                           int64_t numSMs) {
  int64_t elementBytes = getTileElementBytes(op);
  int64_t blockK = std::max<int64_t>(16, kSwizzleBytes / elementBytes);
  bool packed = hasPackedWeights(op);
  int64_t blockN = chooseBlockN(op, tokens, numSMs);
  // Routing blocks of 128 rows and more give two warpgroups one expert's
  // rows: 128-row tiles against one weight tile halve the weight traffic
  // per flop, which bounds the 64-row tiles at large T (L2, ncu).
  int64_t warpgroups = op.getBlockM() >= 2 * kWgmmaRows ? 2 : 1;
  // A gathering GEMM's consumers issue the cp.async row gathers themselves,
  // between their wgmmas, unless a producer warpgroup does. Every tuned bf16
  // entry of one from 256 tokens has the producer (20 of 20; the heuristic
  // without it was up to 1.44x slower: DeepSeek-V3 gemm1, 128-row blocks,
  // T = 4096: 9316 against 6450 us, bench/RESULTS.md). With fp8 block
  // scales, two consumer warpgroups fed by a producer promote while the
  // other multiplies, where the plain loop's block barrier keeps them in
  // step (4 experts x 8192 rows, N = 4096, K = 7168: 741-793 -> 935-976
  // TFLOP/s); one warpgroup's block would hold a multiprocessor alone, so
  // 64-row tiles stay plain. MXFP4's producer decodes the weights, and a
  // producer streams the 64-column decode tiles of gated GEMMs (moe-tune's
  // choice for each).
  bool gathering = op.getInputOrder() == RowOrder::token;
  bool narrowDecode = !packed && blockN == 64;
  bool producer =
      packed || narrowDecode ||
      (gathering && elementBytes == 2 && tokens >= kWideTileTokens) ||
      (hasBlockScales(op) && warpgroups == 2);
  // Weights streamed at about a row per expert (decode): three stages let
  // three blocks share a multiprocessor instead of two and hide more of the
  // loads' latency (moe-tune on the H100 at T = 1: fp8 DeepSeek-V3 and
  // Kimi-K2 first GEMM 126 -> 105 us, second 76 -> 69; bf16 gemm1 214 ->
  // 189 us and Kimi-K2's gemm2 127 -> 115, where 5 of the 8 tuned bf16
  // entries have three); the 64-column tiles of too few 128-column ones
  // take six, each of the few blocks then streaming more bytes at a time
  // (Qwen3-30B-A3B's first GEMM at T = 1: 34.7 us with three, 29.2 with
  // six; where tiles are many, six cost blocks per multiprocessor instead:
  // Mixtral-8x7B's 896, 170.8 us with three, 240.9 with six). Two consumer
  // warpgroups fed by a producer take three too without a persistent grid,
  // as moe-tune chose for each such entry (DeepSeek-V3 and Kimi-K2 gemm1 at
  // T = 1024 and 4096); a persistent one keeps four, its ring running on
  // across tiles (Mixtral-8x7B's first GEMM at T = 1024: 930 -> 860 us,
  // Qwen3-30B-A3B's at 4096: 461 -> 429; Qwen3-30B-A3B's at 1024: 300 ->
  // 303). MXFP4 keeps the four its decode, stages - 2 K tiles behind the
  // loads, was measured with.
  bool streamK = !producer && isStreamKBalanced(op, tokens, numSMs, blockN,
                                                blockK, warpgroups);
  bool persistent = streamK || isPersistentGathering(op, tokens, producer);
  int64_t stages = narrowDecode ? 6
                   : !packed && (isWeightStreaming(op, tokens) ||
                                 (producer && warpgroups == 2 &&
                                  elementBytes == 2 && !persistent))
                       ? 3
                       : 4;
  return GemmConfigAttr::get(
      op.getContext(), op.getBlockM(), blockN, blockK, stages, warpgroups,
      /*split_k=*/1, /*tma_a=*/!gathering, /*tma_b=*/true,
      /*cluster_m=*/1, /*cluster_n=*/1, persistent,
      /*warp_specialized=*/producer, streamK);
}

int64_t mlir::moe::chooseSplitK(GroupedMatmulOp op, GemmConfigAttr config,
                                int64_t tokens, int64_t numSMs) {
  // Each expert's rows fill whole blocks of at most one wgmma (64 rows) per
  // warpgroup.
  int64_t blockRows = std::min<int64_t>(config.getBlockM(),
                                        kWgmmaRows * config.getNumWarpgroups());
  int64_t tiles =
      countTiles(op, tokens, blockRows,
                 op.isGated() ? config.getBlockN() / 2 : config.getBlockN());
  // A split pays for its second launch and partial sums only when it at
  // least doubles the blocks at work: Mixtral-8x7B's gemm2 at T = 256, 128
  // tiles on 132 multiprocessors, split in two took 397 us against 334
  // unsplit (bench/RESULTS.md).
  if (2 * tiles > numSMs)
    return 1;
  int64_t steps = llvm::divideCeil(op.getReductionSize(), config.getBlockK());
  int64_t tileWeightBytes =
      config.getBlockN() * op.getReductionSize() * getWeightBits(op) / 8;
  int64_t splits = std::min<int64_t>(
      {kMaxSplitK, static_cast<int64_t>(llvm::divideCeil(numSMs, tiles)),
       std::max<int64_t>(1, steps / config.getNumStages()),
       std::max<int64_t>(1, tileWeightBytes / kMinSplitWeightBytes)});
  while (splits > 1 && !everySplitHasKTile(steps, splits))
    --splits;
  return splits;
}
