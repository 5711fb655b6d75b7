//===- WgmmaGroupedMatmul.cpp - The tensor-core grouped matmul ------------===//
//
// The wgmma kernel of a grouped matmul under its #moe.gemm_config. A block
// computes tiles of (block_rows rows of one expert) x block_n accumulator
// columns, one warpgroup per 64 rows (one or two), through a ring of
// `num_stages` shared-memory stages guarded by mbarriers. Its loop nest, per
// variant (S = num_stages, a step is one K tile of block_k):
//
//   plain (every thread loads and multiplies):
//     init ring
//     for tile in tiles of this block:            // one, or persistent
//       load steps 0 .. S-2                       // TMA, cp.async gathers
//       for step in split's K tiles:
//         wait full[stage(step)]
//         wgmma (step) ; wait for step - 1's group
//         block barrier ; load step + S - 1 into the stage step - 1 freed
//       epilogue (or split-K partials)
//
//   warp-specialized (producer warpgroups after the consumers: one, or for
//   MXFP4 weights one per consumer warpgroup):
//     init ring
//     for tile in tiles of this block:
//       producer:  for step: wait empty[stage(step)] (from the second round
//                            on) ; load step
//                  (gathers arrive on full[] S-2 steps later, after their
//                   own cp.async wait and proxy fence)
//       consumers: for step: wait full[stage(step)] ; wgmma (step) ;
//                            wait for step - 1's group ; arrive empty[step-1]
//                            (fp8 block scales: wait for step's group ;
//                            arrive empty[step] ; promote)
//                  arrive empty[last stage] if tiles follow ; epilogue
//     (empty counts a warp's arrival from lane 0; with a two-block cluster
//     that multicasts, the peer's warps too, and each producer loads half
//     of every weight box into both blocks' stages)
//
//   persistent (either of the above): grid = min(tiles, SMs x resident
//   blocks); tile = blockIdx, blockIdx + gridDim, ... over the tiles of the
//   padded rows (counted on the device); the ring's count runs on across
//   tiles, so stages and barrier phases continue where the last tile left.
//
//   stream-K (persistent): the whole rounds of tiles as above; the L tiles
//   of the last round, which would leave G - L blocks idle, each in P =
//   G / L parts along K, one part a block, part p of tile i on block
//   i + L p (so that the blocks at the same K tiles are neighbours):
//     accumulate the part ; store its sums ; count it on the tile's counter
//     the last to count: sum the P parts' sums in part order, epilogue
//
// A grouped matmul whose output a moe.quantize takes (the first GEMM of an
// fp8 layer) quantizes in its epilogue instead (getEpilogueQuantize): a
// block's tile then spans a quantization group of columns, computed as
// `group / block columns` column tiles one after another in the ring, the
// activation's values of each held in registers, rounded as the unfused
// epilogue would store them, until the last gives each row's group its
// amax:
//
//     for column tile c of the block's tile:   // the loops above, per c
//       accumulate ; hold act(gate) * up, rounded to the output type
//     amax over the held values of each row (the lanes of a quad)
//     store e4m3(value / scale) and the scale
//
// Tiles are rasterized in groups of 16 row blocks, row block fastest, so the
// blocks resident at once share weight tiles; the splits of a tile are
// neighbours. Weights load by TMA through one 3-D map over [E, N, K]; sorted
// rows by TMA through a 2-D map over [C, K]; token rows by cp.async gathers
// written in TMA's 128-byte swizzle. Both row loads are PTX of their own,
// under an L2 policy (nvgpu's TMA and cp.async ops take none): evict_last
// where experts average at most two row blocks (rowsEvictLast), since
// every column tile reads a row block's rows again while the weights
// stream past. wgmma reads K-major tiles through
// shared-memory descriptors; the accumulators stay in registers from the
// first wgmma (scale-d 0, K tile 0 peeled) to the epilogue.
//
// FP8 (e4m3) operands take k32 wgmmas over the same 128-byte K tiles, and
// their scales: with 128 x 128 weight blocks, each K tile's wgmmas start
// from zero and, once done, are added to the accumulators times the tile's
// row and weight-box scales (promotion: the tensor cores' fp8 sums are
// narrower than fp32); with channel or tensor scales, the accumulators are
// scaled once after the K loop. A new operand kind is such an addition of
// parts: its stage layout (the byte sizes), its loads (loadStage), its MMAs
// (multiplyStage) and what is applied to the sums (scaleSums, emitEpilogue).
//
//===----------------------------------------------------------------------===//

#include "GroupedMatmul.h"
#include "Hopper.h"

#include "moe/Conversion/MoeCommon/Fp8Math.h"
#include "moe/Conversion/MoeCommon/RoutingMath.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

/// Bytes of each store of a staged epilogue (emitEpilogue).
constexpr int64_t kStagedChunkBytes = 16;
/// The named barrier of the consumer warpgroups (0 is the block's).
constexpr int64_t kConsumerBarrier = 1;

/// Row blocks per group of the tile order (see tileAt).
constexpr int64_t kRasterRowBlocks = 16;
/// MXFP4 decoding: a row of a K tile is 8 chunks of 16 decoded bytes, so
/// each producer warpgroup's 128 threads decode 16 rows per pass.
constexpr int64_t kDecodeChunks = kSwizzleBytes / kCopyBytes;
/// LLVM's sync scope of the GPU (PTX's .gpu): the stream-K counters'.
constexpr StringLiteral kDeviceScope = "device";

/// A stream-K block's part of a tile: its K tiles [first, first + count).
struct KRange {
  Value first, count;
};
/// Stream-K: K tiles a part of a tile takes at least, so that its ring
/// fills.
constexpr int64_t kMinPartSteps = 4;

/// One tile of the grid, (row block, N tile, K split), as a block sees it.
struct Tile {
  Value split, columnTile, firstRow, firstColumn, expert;
  /// Whether the tile has work: its rows lie inside the padded rows and
  /// belong to an expert. Uniform over the block, so its barriers match.
  Value active;
  /// The split's K tiles: [firstStep, firstStep + numSteps).
  Value firstStep, numSteps;
  /// K tiles the ring took before this tile; null when the tile is the
  /// block's only one.
  Value ringBase;
  /// With a cluster (cluster_m = 2): whether this block and its peer, the
  /// other block of the cluster, both have work and one expert, so that each
  /// loads half of the weight tile for both by multicast; null without one.
  Value multicast;
  /// Stream-K: whether firstStep and numSteps may be the block's part of
  /// one of the last round's tiles (finish).
  bool streamed = false;
  /// Set inside the active region: this thread's 16-byte chunk and first row
  /// of the row gathers and the chunk's swizzled column, and the wgmma
  /// descriptors of stage 0's row and weight tiles.
  Value chunk, chunkRow, swizzledColumn, rowDescriptors, weightDescriptors;
  /// FP8: the input-scale rows of the thread's two accumulator rows.
  std::array<Value, 2> scaleRows;
};

/// The fp8 scales of a thread's accumulators: the input scales of its two
/// rows, and the weight scale of each of its columns (column block j, pair
/// element i at 2 j + i).
struct SumScales {
  std::array<Value, 2> rows;
  SmallVector<Value> columns;
};

/// What the K loop carries: the accumulators and, with weight blocks, the
/// scales of the K tile to promote next (loadBlockScales), loaded one K tile
/// ahead: loaded beside their own wgmmas, their latency stalled every
/// promotion and held fp8 to the tensor cores' bf16 rate.
struct Accumulation {
  Value sums;
  SmallVector<Value> scales;
};

/// A gathering thread's token row in each pass over the row tile, and
/// whether it is a routed slot.
using GatherSources = SmallVector<std::pair<Value, Value>>;

/// Registers per thread at launch (the kernel's .maxnreg) and, after
/// setmaxnreg, of the producer and the consumer warpgroups.
struct RegisterSplit {
  int64_t launch, producer, consumer;
};

/// Fused quantization: where the thread's value pair `position` of a block
/// tile lies, in the order the column tiles and then their fragment blocks
/// and row halves produce them (HeldValues): its row half, the first
/// column of its fragment block in the tile (the thread's column is
/// 2 (lane % 4) more), and its quantization group within the tile.
struct HeldPosition {
  int64_t half, blockColumn, group;
};

/// Fused quantization: the thread's value pairs of a block tile's column
/// tiles (vector<2 x output type>), in HeldPosition order. Only the values
/// stay in registers across the next column tile's K loop.
using HeldValues = SmallVector<Value>;

/// Builds the wgmma kernel (and the split-K reduction) of one op.
class WgmmaGroupedMatmulEmitter : GemmShape {
public:
  WgmmaGroupedMatmulEmitter(PlanBuilder &plan, OpBuilder &builder,
                            GroupedMatmulOp op, GemmConfigAttr config,
                            QuantizeOp epilogueQuantize, bool rowsEvictLast);
  void emit();

private:
  // The kernel's arguments, workspaces and grid in the plan.
  gpu::GPUFuncOp declareKernel();
  void placeStaging();
  // The kernel prologue: arguments, thread roles, the ring's barriers.
  void setUpKernel(gpu::GPUFuncOp kernel);
  void initRing(Value multicast = Value());
  void syncCluster();
  // The grid: one tile per block, or persistent blocks.
  void emitPersistentTiles(Value blockId);
  void emitStreamKTiles(Value blockId, Value grid, Value numTiles,
                        Value numRowBlocks);
  Value nextTile(Value tileIndex, Value numRowBlocks, Value ringBase,
                 std::optional<KRange> part = std::nullopt);
  Value emitTile(Value tileIndex, Value numRowBlocks, Value ringBase,
                 std::optional<KRange> part = std::nullopt);
  Tile tileAt(Value tileIndex, Value numRowBlocks, Value ringBase);
  Tile columnTileOf(const Tile &tile, Value index);
  void forEachColumnTile(const Tile &tile,
                         function_ref<Value(const Tile &)> multiply);
  std::pair<Value, Value> slotOf(const Tile &tile, Value rowInBlock);
  SmallVector<Value> outputIndices(const Tile &tile, Value rowInBlock,
                                   Value slot, Value column);
  // Stage loads.
  Value sharedView(ArrayRef<int64_t> shape, Value byteOffset,
                   Type type = Type());
  Value rowTileOffset(Value stage);
  Value sharedAddress(Value byteOffset);
  Value weightBoxOffset(Value stage, int64_t box);
  Value packedBoxOffset(Value stage, int64_t box);
  Value tensorMapDescriptor(Value map, Value argument);
  void setUpGathers(Tile &tile);
  GatherSources gatherSources(const Tile &tile);
  void loadStage(const Tile &tile, Value step,
                 ArrayRef<std::pair<Value, Value>> sources);
  void loadRowTile(const Tile &tile, Value stage, Value k0);
  void loadWeightBox(const Tile &tile, Value stage, Value k0, int64_t box);
  void loadWeightRows(const Tile &tile, Value stage, Value k0, int64_t box,
                      Value part, Value multicastMask);
  void gatherRows(const Tile &tile, Value stage, Value k0,
                  ArrayRef<std::pair<Value, Value>> sources);
  void copyRowChunk(const Tile &tile, Value rowTile, Value rows, Value tileRow,
                    Value token, Value column, Value valid);
  void awaitGathers(int64_t pendingGroups);
  void fenceAsyncProxy();
  // The ring.
  Value ringCount(const Tile &tile, Value step);
  Value stageOf(const Tile &tile, Value step);
  Value parityOf(const Tile &tile, Value step, int64_t round);
  void waitFull(const Tile &tile, Value step);
  // The MMAs.
  void setUpDescriptors(Tile &tile);
  Value boxFirstRow(const Tile &tile, int64_t box);
  Value multiplyStage(const Tile &tile, Value step, Value consumer, Value sum,
                      bool overwrite);
  Accumulation multiplyScaled(const Tile &tile, Value step, Value consumer,
                              const Accumulation &carried, bool first,
                              function_ref<void(Value, bool)> afterStep);
  Value accumulate(const Tile &tile, Value consumer,
                   function_ref<void(Value, bool)> afterStep);
  // FP8 scales.
  void setUpScaleRows(Tile &tile);
  Value loadRowScale(const Tile &tile, int64_t half, Value kBlock);
  SmallVector<Value> loadBlockScales(const Tile &tile, Value step);
  SumScales blockScalesOf(ValueRange loaded);
  SumScales loadWholeSumScales(const Tile &tile);
  Value applyScales(Value sums, Value partials, const SumScales &scales);
  // The roles.
  void emitPlainLoop(const Tile &tile);
  Value multiplyPlain(const Tile &tile, const GatherSources &sources);
  void emitWarpSpecialized(const Tile &tile);
  void emitProducer(const Tile &tile);
  void produce(const Tile &tile, const GatherSources &sources);
  void waitEmpty(const Tile &tile, Value step);
  void freeStage(const Tile &tile, Value stage);
  void arrivePeerEmpty(Value stage);
  // MXFP4 weights, decoded by the producer.
  void producePacked(const Tile &tile, const GatherSources &sources);
  SmallVector<Value> loadMxScales(const Tile &tile, Value step);
  Value mxScaleBlock(const Tile &tile, Value step);
  Value mxScaleRow(const Tile &tile, int64_t pass);
  void decodeStage(const Tile &tile, Value step, ValueRange scales);
  void emitConsumer(const Tile &tile, Value consumer);
  // The accumulators' way out.
  Value scaleWholeSums(const Tile &tile, Value accumulators);
  void finish(const Tile &tile, Value accumulators);
  void finishTile(const Tile &tile, Value accumulators);
  // Stream-K.
  SmallVector<Value> sumParts(Value accumulators);
  Value countPart(Value tailTile);
  Value streamSumsColumn(int64_t sum);
  void storeStreamSums(Value accumulators, Value slot);
  Value addStreamSums(Value accumulators, Value slot);
  Value withBias(const Tile &tile, Value sum, Value column, int64_t offset);
  Value epilogueValue(const Tile &tile, Value accumulators, int64_t index,
                      Value column, Value weight);
  void emitEpilogue(const Tile &tile, Value accumulators, Value laneRow,
                    Value laneColumn);
  void syncConsumers();
  void storeStagedRows(const Tile &tile, Value staging);
  // Fused quantization.
  HeldPosition heldPosition(int64_t position);
  HeldValues valuesToHold(const Tile &tile, Value accumulators);
  Value groupScale(ArrayRef<Value> pairs, ArrayRef<Value> columns);
  void storeQuantized(const Tile &tile, const HeldValues &held);

  PlanBuilder &plan;
  OpBuilder &builder;
  GroupedMatmulOp op;
  GemmConfigAttr config;
  /// The moe.quantize of the output that the epilogue computes, or null.
  QuantizeOp epilogueQuantize;
  /// Whether the row loads take the L2 evict_last policy (rowsEvictLast).
  bool rowsEvictLast;

  // The op's sizes and the tile shapes of its config.
  Type elementType;
  int64_t elementBytes, blockN, blockK, splits;
  /// K elements of one wgmma: 32 bytes of each operand.
  int64_t wgmmaK;
  /// Quantized operands; whether they are fp8 (scaled sums), scaled per
  /// 128 x 128 weight block (promotion), or packed MXFP4 weights that the
  /// producer decodes into the stages' weight tiles.
  QuantizationAttr quantization;
  bool fp8, blockScaled, packed;
  bool warpSpecialized;
  /// Whether a persistent grid shares its last tiles' K tiles (stream_k).
  bool streamK;
  /// Consumer warpgroups; each takes one wgmma's rows of the block
  /// (warpgroup w rows [64 w, 64 w + 64)), all against the block's one
  /// weight tile. Smaller routing blocks leave the rest of the rows masked.
  int64_t warpgroups;
  /// Rows of the row tile (moe-tma's input box), rows a block computes.
  int64_t tileRows, blockRows;
  /// Threads, and those that load (all, or the producer warpgroup).
  int64_t threads, loaders;
  /// Warp-specialized, the producer warpgroups: one, or with MXFP4 one per
  /// consumer warpgroup, since decoding the weights bounds the kernel
  /// (bench/RESULTS.md); and the rows their threads decode per pass.
  int64_t producerWarpgroups, decodeRowsPerPass;
  /// Gated: the gate and up halves of the output columns side by side, so
  /// act(gate) * up pairs registers of one thread.
  int64_t outputColumnsPerBlock;
  /// Weight box rows, boxes per stage, and the rows of a box that one TMA
  /// load brings (moe-tma's weight box): all, or with a cluster a block's
  /// part.
  int64_t boxRows, numBoxes, loadRows;
  /// Blocks per cluster along M (cluster_m): 1, or 2 sharing weight tiles.
  int64_t clusterBlocks;
  /// Warp-specialized fp8 with block scales, one consumer warpgroup and a
  /// tile per block: the producer warpgroup hands registers to the
  /// consumers (once, at the role split), so that two blocks of 256 threads
  /// share a multiprocessor (one at the 161 the kernel takes without); a
  /// gathering producer keeps more for its addresses.
  std::optional<RegisterSplit> registerSplit;
  /// Stage bytes: the row tile, the weight tile (decoded, for MXFP4), the
  /// packed MXFP4 weight tile, and what TMA brings in on `full`; and the
  /// block's shared memory (the ring, and any staging behind it).
  int64_t rowTileBytes, weightTileBytes, packedTileBytes, stageTmaBytes,
      sharedBytes;
  int64_t numColumnTiles, numKTiles;
  /// Column tiles per block tile (more than one when a quantization group
  /// spans several), block tiles across the columns, and, with a fused
  /// quantization, its group of columns (0 for a static scale).
  int64_t columnTilesPerTile, numBlockColumns, quantizeGroup;
  /// Where in shared memory the epilogue stages the block's output tile to
  /// store it a row at a time in 16-byte chunks (placeStaging, emitEpilogue),
  /// if it does; and the staged rows' pitch in elements.
  std::optional<int64_t> stagingOffset;
  int64_t stagingPitch;
  MbarrierRing ring;

  // The kernel being built.
  std::optional<ReductionBuffers> reduction;
  ImplicitLocOpBuilder b;
  LoopBuilder wb{b};
  KernelArgList args;
  unsigned inputArg, weightsArg, sortedIdsArg, expertIdsArg, numPaddedArg;
  std::optional<unsigned> routedWeightsArg, outputArg, partialsArg, slotRowsArg,
      inputScalesArg, weightScalesArg, quantizedArg, quantizedScalesArg,
      staticScaleArg, biasArg, streamSumsArg, streamCountersArg;
  /// Stream-K: the last round's tiles and the parts each is split into.
  Value tailTiles, tileParts;
  Value input, sorted, experts, padded, routedWeights, output, partials,
      slotRows, inputScales, weightScales, quantized, quantizedScales,
      staticScale, bias, streamSums, streamCounters;
  Value routedSlots, sharedBase, weightMap, rowMap;
  /// The L2 policy of the row loads where rowsEvictLast: evict_last, since
  /// every column tile of a row block reads its rows again while the
  /// weights stream past (DeepSeek-V3 at T = 4096: 0.55 GB less read by the
  /// first GEMM, 0.84 GB by the second; bench/RESULTS.md). Null otherwise:
  /// the rows load through nvgpu's ops, without one, as they always did.
  Value rowPolicy;
  Value tid, warp, lane, loader, leader;
  /// With a cluster: this block's rank in it, and its peer's.
  Value clusterRank, peerRank;
  /// `full[s]`: stage s holds its K tile. Warp-specialized, `empty[s]`: the
  /// consumers are done with stage s. MXFP4, `staged[s]`: the packed weight
  /// tile of stage s is in.
  Value full, empty, staged;
};

WgmmaGroupedMatmulEmitter::WgmmaGroupedMatmulEmitter(
    PlanBuilder &plan, OpBuilder &builder, GroupedMatmulOp op,
    GemmConfigAttr config, QuantizeOp epilogueQuantize, bool rowsEvictLast)
    : GemmShape(op), plan(plan), builder(builder), op(op), config(config),
      epilogueQuantize(epilogueQuantize),
      rowsEvictLast(rowsEvictLast), ring{config.getNumStages()},
      b(op.getLoc(), op.getContext()) {
  elementType = getTileElementType(op);
  elementBytes = getTileElementBytes(op);
  wgmmaK = kWgmmaKBytes / elementBytes;
  quantization = op.getQuantizationAttr();
  fp8 = quantization && !quantization.isWeightOnly();
  blockScaled = hasBlockScales(op);
  packed = hasPackedWeights(op);
  blockN = config.getBlockN();
  blockK = config.getBlockK();
  splits = config.getSplitK();
  warpgroups = config.getNumWarpgroups();
  tileRows = getInputTmaBox(config).front();
  warpSpecialized = config.getWarpSpecialized();
  streamK = config.getStreamK();
  producerWarpgroups = !warpSpecialized ? 0 : packed ? warpgroups : 1;
  threads = (warpgroups + producerWarpgroups) * kWarpgroupThreads;
  loaders = warpSpecialized ? producerWarpgroups * kWarpgroupThreads : threads;
  decodeRowsPerPass = loaders / kDecodeChunks;
  blockRows = std::min(blockM, tileRows);
  outputColumnsPerBlock = gated ? blockN / 2 : blockN;
  boxRows = getWeightBoxRows(op, config);
  numBoxes = 1 + gated;
  loadRows = getWeightsTmaBox(op, config)[1];
  clusterBlocks = config.getClusterM();
  if (warpSpecialized && blockScaled && warpgroups == 1 &&
      !config.getPersistent())
    registerSplit =
        tokenInput ? RegisterSplit{128, 88, 168} : RegisterSplit{128, 40, 216};
  rowTileBytes = tileRows * blockK * elementBytes;
  weightTileBytes = blockN * blockK * elementBytes;
  packedTileBytes = packed ? blockN * blockK * getWeightBits(op) / 8 : 0;
  stageTmaBytes =
      (packed ? 0 : weightTileBytes) + (tokenInput ? 0 : rowTileBytes);
  sharedBytes =
      ring.stages * (rowTileBytes + weightTileBytes + packedTileBytes);
  numColumnTiles = llvm::divideCeil(columns, outputColumnsPerBlock);
  numKTiles = llvm::divideCeil(k, blockK);
  quantizeGroup = epilogueQuantize && !epilogueQuantize.getScale()
                      ? epilogueQuantize.getGroupSize()
                      : 0;
  columnTilesPerTile =
      std::max<int64_t>(1, quantizeGroup / outputColumnsPerBlock);
  numBlockColumns = llvm::divideCeil(numColumnTiles, columnTilesPerTile);
  placeStaging();
}

/// Where the epilogue stages the output tile (emitEpilogue), if anywhere: in
/// the ring, whose stages are free once the tile's last K tile is
/// multiplied, unless a producer is filling them for the block's next tile
/// (a persistent warp-specialized grid); there behind the ring, where that
/// leaves the multiprocessor as many blocks. 16 bytes of padding a row put
/// the rows of a thread's column pair in different banks and keep every
/// row's chunks 16-byte aligned.
void WgmmaGroupedMatmulEmitter::placeStaging() {
  Type outputElement =
      cast<RankedTensorType>(op.getOutput().getType()).getElementType();
  int64_t outputBytes = outputElement.getIntOrFloatBitWidth() / 8;
  stagingPitch = outputColumnsPerBlock + kStagedChunkBytes / outputBytes;
  int64_t stagingBytes = tileRows * stagingPitch * outputBytes;
  if (splits > 1 || epilogueQuantize || outputBytes != 2 ||
      columns % (kStagedChunkBytes / outputBytes) != 0)
    return;
  if (!config.getPersistent() || !warpSpecialized) {
    if (stagingBytes <= sharedBytes)
      stagingOffset = 0;
    return;
  }
  int64_t withStaging = sharedBytes + stagingBytes;
  if (withStaging <= kMaxBlockSharedBytes &&
      residentBlocks(threads, blockN, withStaging) ==
          residentBlocks(threads, blockN, sharedBytes)) {
    stagingOffset = sharedBytes;
    sharedBytes = withStaging;
  }
}

//===----------------------------------------------------------------------===//
// The plan and the kernel prologue
//===----------------------------------------------------------------------===//

gpu::GPUFuncOp WgmmaGroupedMatmulEmitter::declareKernel() {
  auto [capacity, rows, sortedIds, expertIds] = useGemmOperands(plan, op);
  inputArg = args.add(
      tokenInput ? KernelArg(rows)
                 : KernelArg::tensorMap(plan.tensorMapOf(op.getInputMap())));
  weightsArg =
      args.add(KernelArg::tensorMap(plan.tensorMapOf(op.getWeightsMap())));
  sortedIdsArg = args.add(sortedIds);
  expertIdsArg = args.add(expertIds);
  numPaddedArg = args.add(plan.use(op.getNumPadded()));
  if (fp8) {
    unsigned scales = plan.use(op.getInputScales());
    plan.refineInput(scales, {tokenInput ? gemmTokens(plan, op) : capacity,
                              PlanBuilder::constant(llvm::divideCeil(
                                  k, quantization.getActivationGroupSize(k)))});
    inputScalesArg = args.add(scales);
  }
  weightScalesArg = args.addIf(static_cast<bool>(quantization),
                               [&] { return plan.use(op.getWeightScales()); });
  // Split K: the splits' partial sums go to workspaces that the reduction
  // kernel adds (SplitK.cpp); it takes the bias, the routed weights and the
  // output.
  biasArg =
      args.addIf(biased && splits == 1, [&] { return plan.use(op.getBias()); });
  if (splits > 1) {
    reduction = defineReductionBuffers(plan, builder, op, splits);
    partialsArg = args.add(reduction->partials);
    slotRowsArg = args.add(reduction->slotRows);
  } else if (epilogueQuantize) {
    // The quantize op's results take the place of the output.
    int64_t groups = llvm::divideCeil(columns, epilogueQuantize.getGroupSize());
    quantizedArg =
        args.add(plan.define(epilogueQuantize.getOutput(), "quantized",
                             {capacity, PlanBuilder::constant(columns)}));
    quantizedScalesArg =
        args.add(plan.define(epilogueQuantize.getScales(), "quantize_scales",
                             {capacity, PlanBuilder::constant(groups)}));
    staticScaleArg =
        args.addIf(static_cast<bool>(epilogueQuantize.getScale()),
                   [&] { return plan.use(epilogueQuantize.getScale()); });
  } else {
    routedWeightsArg =
        args.addIf(weighted, [&] { return plan.use(op.getRoutedWeights()); });
    outputArg = args.add(defineOutput(plan, op));
  }
  // A block per tile of the row blocks that can hold rows (whole clusters
  // of them); persistent, as many as the multiprocessors hold at once.
  SizeExpr gridSize =
      PlanBuilder::ceilDiv(paddedRowsBound(plan, op), blockRows * clusterBlocks)
          .times(clusterBlocks * numBlockColumns * splits);
  if (config.getPersistent())
    gridSize = PlanBuilder::min(
        gridSize, plan.numSMs * residentBlocks(threads, blockN, sharedBytes));
  if (streamK) {
    // A block's slot for the sums of its part of a tile of the last round,
    // and a counter a tile of it, zeroed before every call.
    streamSumsArg = args.add(plan.scratch(
        "stream_sums", builder.getF32Type(),
        {gridSize,
         PlanBuilder::constant(warpgroups * kWarpgroupThreads * blockN / 2)}));
    unsigned counters =
        plan.scratch("stream_counters", builder.getI32Type(), {gridSize});
    plan.zero(counters);
    streamCountersArg = args.add(counters);
  }
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul_wgmma", args.get(),
      {gridSize, PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {threads, 1, 1}, /*workgroup=*/{}, sharedBytes);
  if (registerSplit)
    kernel->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(),
                    builder.getI32IntegerAttr(registerSplit->launch));
  // Consecutive blocks form a cluster (.reqnctapercluster): launched as any
  // kernel, the grid a whole number of clusters.
  if (clusterBlocks > 1)
    kernel->setAttr(NVVM::NVVMDialect::getClusterDimAttrName(),
                    builder.getDenseI32ArrayAttr(
                        {static_cast<int32_t>(clusterBlocks), 1, 1}));
  return kernel;
}

void WgmmaGroupedMatmulEmitter::setUpKernel(gpu::GPUFuncOp kernel) {
  b.setInsertionPoint(builder.getInsertionBlock(), builder.getInsertionPoint());
  input = kernel.getArgument(inputArg);
  Value weights = kernel.getArgument(weightsArg);
  sorted = kernel.getArgument(sortedIdsArg);
  experts = kernel.getArgument(expertIdsArg);
  padded = kernel.getArgument(numPaddedArg);
  routedWeights = kernelArgument(kernel, routedWeightsArg);
  output = kernelArgument(kernel, outputArg);
  partials = kernelArgument(kernel, partialsArg);
  slotRows = kernelArgument(kernel, slotRowsArg);
  inputScales = kernelArgument(kernel, inputScalesArg);
  weightScales = kernelArgument(kernel, weightScalesArg);
  quantized = kernelArgument(kernel, quantizedArg);
  quantizedScales = kernelArgument(kernel, quantizedScalesArg);
  bias = kernelArgument(kernel, biasArg);
  streamSums = kernelArgument(kernel, streamSumsArg);
  streamCounters = kernelArgument(kernel, streamCountersArg);
  if (staticScaleArg)
    staticScale = wb.load(kernel.getArgument(*staticScaleArg), {wb.index(0)});
  routedSlots = routedSlotCount(wb, kernel, op);

  // The ring: stage s's row tile at s * rowTileBytes, its weight tile (the
  // boxes one after another) after all row tiles; every tile 1024-aligned.
  sharedBase = dynamicSharedMemory(b, plan.kernels);
  weightMap = tensorMapDescriptor(op.getWeightsMap(), weights);
  rowMap = tokenInput ? Value() : tensorMapDescriptor(op.getInputMap(), input);
  if (rowsEvictLast)
    rowPolicy = evictLastPolicy(b);

  tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  warp = arith::DivUIOp::create(b, tid, wb.index(32));
  lane = arith::RemUIOp::create(b, tid, wb.index(32));
  // Warp-specialized, the producer warpgroups load; `loader` numbers the
  // loading threads (the leader issues TMA and initialises the barriers).
  loader = warpSpecialized
               ? arith::SubIOp::create(b, tid,
                                       wb.index(warpgroups * kWarpgroupThreads))
               : tid;
  leader = wb.cmpi(arith::CmpIPredicate::eq, loader, wb.index(0));
  auto barrierGroup = nvgpu::MBarrierGroupType::get(
      b.getContext(), b.getI64IntegerAttr(kSharedAddressSpace), ring.stages);
  // Warp-specialized, the gathering producer threads arrive on `full`
  // themselves once their rows are in.
  full = nvgpu::MBarrierCreateOp::create(b, barrierGroup);
  empty = warpSpecialized
              ? Value(nvgpu::MBarrierCreateOp::create(b, barrierGroup))
              : Value();
  staged = packed ? Value(nvgpu::MBarrierCreateOp::create(b, barrierGroup))
                  : Value();
}

/// Initialises the barriers before any thread uses them: once per block, by
/// the blocks that have a tile. When the block and its peer `multicast`,
/// each block's `empty` also counts the peer's consumer warps (its
/// producer fills both blocks' stages), and neither block loads before both
/// have their barriers.
void WgmmaGroupedMatmulEmitter::initRing(Value multicast) {
  // The leader's arrival with the bytes TMA brings in (when it brings any
  // or nothing else arrives), and each producer thread's once its gathered
  // rows or decoded weights are in.
  bool producerReports = warpSpecialized && (tokenInput || packed);
  int64_t fullArrivals =
      (stageTmaBytes > 0 || !producerReports) + (producerReports ? loaders : 0);
  // A consumer warp's lane 0 frees a stage for the warp.
  int64_t consumerWarps = warpgroups * kWarpgroupThreads / 32;
  Value emptyArrivals = wb.index(consumerWarps);
  if (multicast)
    emptyArrivals =
        wb.select(multicast, wb.index(2 * consumerWarps), emptyArrivals);
  wb.ifThen(leader, [&] {
    nvgpu::TmaPrefetchOp::create(b, weightMap, Value());
    if (rowMap)
      nvgpu::TmaPrefetchOp::create(b, rowMap, Value());
    for (int64_t stage = 0; stage < ring.stages; ++stage) {
      nvgpu::MBarrierInitOp::create(b, full, wb.index(fullArrivals),
                                    wb.index(stage), Value());
      if (empty)
        nvgpu::MBarrierInitOp::create(b, empty, emptyArrivals, wb.index(stage),
                                      Value());
      if (staged)
        nvgpu::MBarrierInitOp::create(b, staged, wb.index(1), wb.index(stage),
                                      Value());
    }
    if (multicast)
      NVVM::FenceMbarrierInitOp::create(b);
  });
  gpu::BarrierOp::create(b);
  if (multicast)
    wb.ifThen(multicast, [&] { syncCluster(); });
}

/// Every thread of the cluster's blocks waits for all to arrive.
void WgmmaGroupedMatmulEmitter::syncCluster() {
  NVVM::ClusterArriveOp::create(b, b.getUnitAttr());
  NVVM::ClusterWaitOp::create(b, b.getUnitAttr());
}

void WgmmaGroupedMatmulEmitter::emit() {
  OpBuilder::InsertionGuard guard(builder);
  setUpKernel(declareKernel());
  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  if (clusterBlocks > 1) {
    clusterRank = arith::RemUIOp::create(b, blockId, wb.index(clusterBlocks));
    peerRank = arith::XOrIOp::create(b, clusterRank, wb.index(1));
  }
  if (!config.getPersistent()) {
    // One block per tile of the row blocks that can hold rows, in whole
    // clusters; those past the padded rows find nothing to do.
    Value numRowBlocks = arith::MulIOp::create(
        b,
        arith::CeilDivUIOp::create(b, paddedRowsBound(wb, routedSlots, op),
                                   wb.index(blockRows * clusterBlocks)),
        wb.index(clusterBlocks));
    emitTile(blockId, numRowBlocks, Value());
  } else {
    emitPersistentTiles(blockId);
  }
  if (reduction)
    emitSplitReduction(plan, builder, op, splits, *reduction);
}

/// Persistent: the blocks walk the tiles of the padded rows, counted on the
/// device (a multiple of block_m, so of the tile rows), a grid apart.
void WgmmaGroupedMatmulEmitter::emitPersistentTiles(Value blockId) {
  Value numRowBlocks = arith::DivUIOp::create(
      b, wb.toIndex(wb.load(padded, {})), wb.index(blockRows));
  Value numTiles = arith::MulIOp::create(b, numRowBlocks,
                                         wb.index(numBlockColumns * splits));
  initRing();
  Value grid = gpu::GridDimOp::create(b, gpu::Dimension::x);
  if (streamK) {
    emitStreamKTiles(blockId, grid, numTiles, numRowBlocks);
    return;
  }
  auto tiles =
      scf::ForOp::create(b, blockId, numTiles, grid, ValueRange{wb.index(0)});
  OpBuilder::InsertionGuard loopGuard(b);
  b.setInsertionPointToStart(tiles.getBody());
  scf::YieldOp::create(b, nextTile(tiles.getInductionVar(), numRowBlocks,
                                   tiles.getRegionIterArgs()[0]));
}

/// Stream-K: the blocks walk the whole rounds of tiles, a grid apart, as
/// above; the L tiles of the last round (all tiles when they are fewer
/// than the grid) are split into P = G / L parts along K, at least
/// kMinPartSteps K tiles each, and block b takes part b / L of tile b mod L
/// as its last unit: neighbouring blocks multiply the same K tiles of
/// neighbouring tiles, which share weight tiles in L2 as a whole round's
/// blocks do. The parts' sums meet in finish. One loop walks both, so that
/// the kernel holds one copy of the tile's code.
void WgmmaGroupedMatmulEmitter::emitStreamKTiles(Value blockId, Value grid,
                                                 Value numTiles,
                                                 Value numRowBlocks) {
  Value wholeTiles =
      arith::MulIOp::create(b, arith::DivUIOp::create(b, numTiles, grid), grid);
  tailTiles = arith::SubIOp::create(b, numTiles, wholeTiles);
  Value noTail = wb.cmpi(arith::CmpIPredicate::eq, tailTiles, wb.index(0));
  tileParts =
      wb.select(noTail, wb.index(1),
                arith::MinUIOp::create(
                    b, arith::DivUIOp::create(b, grid, tailTiles),
                    wb.index(std::max<int64_t>(1, numKTiles / kMinPartSteps))));
  Value whole = arith::CeilDivUIOp::create(
      b,
      arith::SubIOp::create(b, arith::MaxUIOp::create(b, wholeTiles, blockId),
                            blockId),
      grid);
  Value hasPart = wb.cmpi(arith::CmpIPredicate::ult, blockId,
                          arith::MulIOp::create(b, tailTiles, tileParts));
  Value units = arith::AddIOp::create(
      b, whole, wb.select(hasPart, wb.index(1), wb.index(0)));
  // The tail's part of this block, when it has one (tailTiles > 0 then).
  Value divisor = wb.select(noTail, wb.index(1), tailTiles);
  Value part = arith::DivUIOp::create(b, blockId, divisor);
  Value tailTile = arith::AddIOp::create(
      b, wholeTiles, arith::RemUIOp::create(b, blockId, divisor));
  auto partStart = [&](Value index) -> Value {
    return arith::DivUIOp::create(
        b, arith::MulIOp::create(b, index, wb.index(numKTiles)), tileParts);
  };
  Value first = partStart(part);
  Value count = arith::SubIOp::create(
      b, partStart(arith::AddIOp::create(b, part, wb.index(1))), first);
  wb.loop(wb.index(0), units, {wb.index(0)},
          [&](Value unit, ValueRange carried) -> SmallVector<Value> {
            Value inTail = wb.cmpi(arith::CmpIPredicate::uge, unit, whole);
            Value tileIndex = wb.select(
                inTail, tailTile,
                arith::AddIOp::create(b, blockId,
                                      arith::MulIOp::create(b, unit, grid)));
            KRange range{wb.select(inTail, first, wb.index(0)),
                         wb.select(inTail, count, wb.index(numKTiles))};
            return {nextTile(tileIndex, numRowBlocks, carried[0], range)};
          });
}

/// A persistent block's next tile (or its K tiles `part`); returns the
/// ring's count after it.
Value WgmmaGroupedMatmulEmitter::nextTile(Value tileIndex, Value numRowBlocks,
                                          Value ringBase,
                                          std::optional<KRange> part) {
  // Without a producer, every thread refills the ring: all must be done
  // with the previous tile's stages first.
  if (!warpSpecialized)
    gpu::BarrierOp::create(b);
  return emitTile(tileIndex, numRowBlocks, ringBase, part);
}

//===----------------------------------------------------------------------===//
// Tiles
//===----------------------------------------------------------------------===//

/// Tile `tileIndex` of the `numRowBlocks` x N tiles x splits. Blocks run in
/// groups of kRasterRowBlocks row blocks, row block fastest within a group,
/// so the blocks resident at once share each weight tile (an expert's rows
/// are consecutive) and a group's rows stay in L2. The splits of a tile are
/// neighbours: they share its rows in L2.
Tile WgmmaGroupedMatmulEmitter::tileAt(Value tileIndex, Value numRowBlocks,
                                       Value ringBase) {
  Tile tile;
  tile.ringBase = ringBase;
  Value linear = arith::DivUIOp::create(b, tileIndex, wb.index(splits));
  tile.split = arith::RemUIOp::create(b, tileIndex, wb.index(splits));
  Value groupBlocks = wb.index(kRasterRowBlocks * numBlockColumns);
  Value group = arith::DivUIOp::create(b, linear, groupBlocks);
  Value inGroup = arith::RemUIOp::create(b, linear, groupBlocks);
  Value groupFirstRowBlock =
      arith::MulIOp::create(b, group, wb.index(kRasterRowBlocks));
  Value groupRowBlocks = arith::MinUIOp::create(
      b, wb.index(kRasterRowBlocks),
      arith::SubIOp::create(b, numRowBlocks, groupFirstRowBlock));
  Value rowBlock =
      arith::AddIOp::create(b, groupFirstRowBlock,
                            arith::RemUIOp::create(b, inGroup, groupRowBlocks));
  tile.columnTile = arith::MulIOp::create(
      b, arith::DivUIOp::create(b, inGroup, groupRowBlocks),
      wb.index(columnTilesPerTile));
  tile.firstRow = arith::MulIOp::create(b, rowBlock, wb.index(blockRows));
  tile.firstColumn = arith::MulIOp::create(b, tile.columnTile,
                                           wb.index(outputColumnsPerBlock));
  tile.expert = wb.toIndex(wb.load(
      experts, {arith::DivUIOp::create(b, tile.firstRow, wb.index(blockM))}));
  tile.active = arith::AndIOp::create(
      b,
      wb.cmpi(arith::CmpIPredicate::ult, tile.firstRow,
              wb.toIndex(wb.load(padded, {}))),
      wb.inRange(tile.expert, wb.index(0), wb.index(numExperts)));
  int64_t stepsPerSplit = llvm::divideCeil(numKTiles, splits);
  tile.firstStep =
      arith::MulIOp::create(b, tile.split, wb.index(stepsPerSplit));
  tile.numSteps = arith::MinUIOp::create(
      b, wb.index(stepsPerSplit),
      arith::SubIOp::create(b, wb.index(numKTiles), tile.firstStep));
  return tile;
}

/// Column tile `index` of the block's `tile`, one after another in the ring
/// (ring counts from 0 without a persistent base, so that each frees its
/// last stage for the next).
Tile WgmmaGroupedMatmulEmitter::columnTileOf(const Tile &tile, Value index) {
  Tile column = tile;
  column.columnTile = arith::AddIOp::create(b, tile.columnTile, index);
  column.firstColumn = arith::AddIOp::create(
      b, tile.firstColumn,
      arith::MulIOp::create(b, index, wb.index(outputColumnsPerBlock)));
  column.ringBase =
      arith::AddIOp::create(b, tile.ringBase ? tile.ringBase : wb.index(0),
                            arith::MulIOp::create(b, tile.numSteps, index));
  return column;
}

/// Runs `multiply` (a column tile's K loop, returning its accumulators) on
/// each column tile of the block's `tile` and finishes them. With several,
/// a loop carries the values held for the fused quantization, shifting in
/// each tile's, and the last quantizes them all: a rolled loop, since
/// ptxas gives each unrolled wgmma chain registers of its own (255 for
/// two).
void WgmmaGroupedMatmulEmitter::forEachColumnTile(
    const Tile &tile, function_ref<Value(const Tile &)> multiply) {
  if (columnTilesPerTile == 1) {
    finish(tile, multiply(tile));
    return;
  }
  int64_t perTile = outputColumnsPerBlock / 4;
  Type outputElement =
      cast<RankedTensorType>(op.getOutput().getType()).getElementType();
  // What the loop carries into its first tiles, which the last never reads
  // (they shift out before it).
  Value unread = arith::ConstantOp::create(
      b, DenseElementsAttr::get(VectorType::get({2}, outputElement),
                                b.getFloatAttr(outputElement, 0.0)));
  SmallVector<Value> init((columnTilesPerTile - 1) * perTile, unread);
  wb.loop(wb.index(0), wb.index(columnTilesPerTile), init,
          [&](Value index, ValueRange carried) -> SmallVector<Value> {
            Tile column = columnTileOf(tile, index);
            HeldValues held(carried.begin(), carried.end());
            llvm::append_range(
                held,
                valuesToHold(column, scaleWholeSums(column, multiply(column))));
            wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, index,
                              wb.index(columnTilesPerTile - 1)),
                      [&] { storeQuantized(column, held); });
            return SmallVector<Value>(ArrayRef(held).drop_front(perTile));
          });
}

/// The slot of the block's row `rowInBlock`, and whether it is a routed slot
/// of this block.
std::pair<Value, Value> WgmmaGroupedMatmulEmitter::slotOf(const Tile &tile,
                                                          Value rowInBlock) {
  Value inBlock =
      wb.cmpi(arith::CmpIPredicate::ult, rowInBlock, wb.index(blockRows));
  Value row = arith::AddIOp::create(
      b, tile.firstRow, wb.select(inBlock, rowInBlock, wb.index(0)));
  Value slot = wb.toIndex(wb.load(sorted, row));
  return {slot, arith::AndIOp::create(
                    b, inBlock, wb.inRange(slot, wb.index(0), routedSlots))};
}

/// The indices of the output element of the block's row `rowInBlock` (of slot
/// `slot`) at `column`, in the op's row order: the slot's [token, slot in
/// token] row, or the sorted row.
SmallVector<Value> WgmmaGroupedMatmulEmitter::outputIndices(const Tile &tile,
                                                            Value rowInBlock,
                                                            Value slot,
                                                            Value column) {
  if (slotOutput)
    return {arith::DivUIOp::create(b, slot, wb.index(slots)),
            arith::RemUIOp::create(b, slot, wb.index(slots)), column};
  return {arith::AddIOp::create(b, tile.firstRow, rowInBlock), column};
}

/// The block's work on one tile, or on its K tiles `part` (stream-K);
/// returns the ring's count after it (null when the tile is the block's only
/// one).
Value WgmmaGroupedMatmulEmitter::emitTile(Value tileIndex, Value numRowBlocks,
                                          Value ringBase,
                                          std::optional<KRange> part) {
  Tile tile = tileAt(tileIndex, numRowBlocks, ringBase);
  if (part) {
    tile.firstStep = part->first;
    tile.numSteps = part->count;
    tile.streamed = true;
  }
  if (clusterBlocks > 1) {
    // The cluster's blocks are consecutive: its row blocks too (tileAt's
    // groups hold whole clusters), with one column tile.
    Tile peer = tileAt(arith::XOrIOp::create(b, tileIndex, wb.index(1)),
                       numRowBlocks, ringBase);
    tile.multicast = arith::AndIOp::create(
        b, arith::AndIOp::create(b, tile.active, peer.active),
        wb.cmpi(arith::CmpIPredicate::eq, tile.expert, peer.expert));
  }
  wb.ifThen(tile.active, [&] {
    if (!ringBase)
      initRing(tile.multicast);
    setUpGathers(tile);
    setUpDescriptors(tile);
    if (fp8)
      setUpScaleRows(tile);
    if (warpSpecialized)
      emitWarpSpecialized(tile);
    else
      emitPlainLoop(tile);
    // The peer may still arrive on this block's barriers, and this block's
    // multicasts land in the peer's stages: neither leaves before both are
    // done.
    if (tile.multicast)
      wb.ifThen(tile.multicast, [&] { syncCluster(); });
  });
  if (!ringBase)
    return Value();
  Value steps =
      arith::MulIOp::create(b, tile.numSteps, wb.index(columnTilesPerTile));
  return arith::AddIOp::create(b, ringBase,
                               wb.select(tile.active, steps, wb.index(0)));
}

//===----------------------------------------------------------------------===//
// Stage loads
//===----------------------------------------------------------------------===//

Value WgmmaGroupedMatmulEmitter::sharedView(ArrayRef<int64_t> shape,
                                            Value byteOffset, Type type) {
  auto viewType = MemRefType::get(shape, type ? type : elementType,
                                  MemRefLayoutAttrInterface(),
                                  b.getI64IntegerAttr(kSharedAddressSpace));
  return memref::ViewOp::create(b, viewType, sharedBase, byteOffset,
                                ValueRange());
}

Value WgmmaGroupedMatmulEmitter::rowTileOffset(Value stage) {
  return arith::MulIOp::create(b, stage, wb.index(rowTileBytes));
}

/// The shared address (i64) `byteOffset` bytes into the ring.
Value WgmmaGroupedMatmulEmitter::sharedAddress(Value byteOffset) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, sharedBase);
  return arith::IndexCastOp::create(b, b.getI64Type(),
                                    arith::AddIOp::create(b, base, byteOffset));
}

Value WgmmaGroupedMatmulEmitter::weightBoxOffset(Value stage, int64_t box) {
  return arith::AddIOp::create(
      b, arith::MulIOp::create(b, stage, wb.index(weightTileBytes)),
      wb.index(ring.stages * rowTileBytes +
               box * boxRows * blockK * elementBytes));
}

/// MXFP4: the packed tiles follow the weight tiles, box after box.
Value WgmmaGroupedMatmulEmitter::packedBoxOffset(Value stage, int64_t box) {
  return arith::AddIOp::create(
      b, arith::MulIOp::create(b, stage, wb.index(packedTileBytes)),
      wb.index(ring.stages * (rowTileBytes + weightTileBytes) +
               box * packedTileBytes / numBoxes));
}

/// The nvgpu view of a map kernel argument: TMA copies of its boxes.
Value WgmmaGroupedMatmulEmitter::tensorMapDescriptor(Value map,
                                                     Value argument) {
  auto mapType = cast<TensorMapType>(map.getType());
  auto type = nvgpu::TensorMapDescriptorType::get(
      b.getContext(),
      MemRefType::get(mapType.getBox(), mapType.getElementType(),
                      MemRefLayoutAttrInterface(),
                      b.getI64IntegerAttr(kSharedAddressSpace)),
      mapType.getSwizzle() == kSwizzleBytes
          ? nvgpu::TensorMapSwizzleKind::SWIZZLE_128B
          : nvgpu::TensorMapSwizzleKind::SWIZZLE_NONE,
      nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
      nvgpu::TensorMapOOBKind::OOB_ZERO,
      nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
  return UnrealizedConversionCastOp::create(b, type, argument).getResult(0);
}

/// Gathered rows: thread t of the loading threads copies 16-byte chunk t % 8
/// of the rows t / 8 + (loaders / 8) j; the sources stay the same for every
/// K tile. Chunk c of row r lands at chunk c ^ (r % 8) of its 128-byte row,
/// as TMA's 128-byte swizzle would put it; r % 8 is the same for all of a
/// thread's rows.
void WgmmaGroupedMatmulEmitter::setUpGathers(Tile &tile) {
  int64_t chunksPerRow = kSwizzleBytes / kCopyBytes;
  tile.chunk = arith::RemUIOp::create(b, loader, wb.index(chunksPerRow));
  tile.chunkRow = arith::DivUIOp::create(b, loader, wb.index(chunksPerRow));
  tile.swizzledColumn = arith::MulIOp::create(
      b,
      arith::XOrIOp::create(
          b, tile.chunk,
          arith::RemUIOp::create(b, tile.chunkRow, wb.index(chunksPerRow))),
      wb.index(kCopyBytes / elementBytes));
}

GatherSources WgmmaGroupedMatmulEmitter::gatherSources(const Tile &tile) {
  int64_t rowsPerPass = loaders / (kSwizzleBytes / kCopyBytes);
  GatherSources sources;
  for (int64_t pass = 0; pass < tileRows / rowsPerPass; ++pass) {
    auto [slot, routed] =
        slotOf(tile, arith::AddIOp::create(b, tile.chunkRow,
                                           wb.index(pass * rowsPerPass)));
    Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
    sources.push_back({wb.select(routed, token, wb.index(0)), routed});
  }
  return sources;
}

/// Loads the split's K tile `step` into its stage: the weight boxes and
/// sorted rows by TMA from the leader, counted in on `full`; token rows by
/// this thread's cp.async gathers (`sources`), committed as one group by the
/// caller.
void WgmmaGroupedMatmulEmitter::loadStage(
    const Tile &tile, Value step, ArrayRef<std::pair<Value, Value>> sources) {
  Value stage = stageOf(tile, step);
  Value k0 = arith::MulIOp::create(
      b, arith::AddIOp::create(b, tile.firstStep, step), wb.index(blockK));
  wb.ifThen(leader, [&] {
    if (stageTmaBytes > 0)
      nvgpu::MBarrierArriveExpectTxOp::create(b, full, wb.index(stageTmaBytes),
                                              stage, Value());
    if (packed) {
      // Packed MXFP4 boxes arrive on `staged`, for the producer to decode.
      nvgpu::MBarrierArriveExpectTxOp::create(
          b, staged, wb.index(packedTileBytes), stage, Value());
      for (int64_t box = 0; box < numBoxes; ++box)
        nvgpu::TmaAsyncLoadOp::create(
            b,
            sharedView({1, boxRows, blockK / 2}, packedBoxOffset(stage, box),
                       b.getI8Type()),
            staged, weightMap,
            ValueRange{arith::DivUIOp::create(b, k0, wb.index(2)),
                       boxFirstRow(tile, box), tile.expert},
            stage, Value(), Value());
    }
    for (int64_t box = 0; box < numBoxes && !packed; ++box)
      loadWeightBox(tile, stage, k0, box);
    if (rowMap)
      loadRowTile(tile, stage, k0);
  });
  if (tokenInput)
    gatherRows(tile, stage, k0, sources);
}

/// The leader's TMA load of the sorted rows of K tile `k0` into `stage`,
/// under `rowPolicy`, or without a policy (nvgpu's).
void WgmmaGroupedMatmulEmitter::loadRowTile(const Tile &tile, Value stage,
                                            Value k0) {
  if (!rowPolicy) {
    nvgpu::TmaAsyncLoadOp::create(
        b, sharedView({tileRows, blockK}, rowTileOffset(stage)), full, rowMap,
        ValueRange{k0, tile.firstRow}, stage, Value(), Value());
    return;
  }
  // The map is the kernel argument `input`, a pointer to its 128 bytes.
  Value map = LLVM::PtrToIntOp::create(b, b.getI64Type(), input);
  loadTile2d(b, sharedAddress(rowTileOffset(stage)), map, wb.toI32(k0),
             wb.toI32(tile.firstRow),
             nvgpu::MBarrierGetOp::create(b, b.getI64Type(), full, stage),
             rowPolicy);
}

/// The leader's TMA loads of weight box `box` of K tile `k0` into `stage`:
/// one, or with a cluster a load per part of the box's rows; when the
/// cluster's blocks multicast, only this block's part, for both.
void WgmmaGroupedMatmulEmitter::loadWeightBox(const Tile &tile, Value stage,
                                              Value k0, int64_t box) {
  if (!tile.multicast) {
    loadWeightRows(tile, stage, k0, box, wb.index(0), Value());
    return;
  }
  Value bothBlocks = arith::ConstantOp::create(
      b, b.getI16IntegerAttr((1 << clusterBlocks) - 1));
  wb.ifThenElse(
      tile.multicast,
      [&] { loadWeightRows(tile, stage, k0, box, clusterRank, bothBlocks); },
      [&] {
        for (int64_t part = 0; part < clusterBlocks; ++part)
          loadWeightRows(tile, stage, k0, box, wb.index(part), Value());
      });
}

/// The TMA load of part `part` (loadRows rows) of weight box `box`, into
/// this block's stage or, with `multicastMask`, the same stage of those
/// blocks of the cluster.
void WgmmaGroupedMatmulEmitter::loadWeightRows(const Tile &tile, Value stage,
                                               Value k0, int64_t box,
                                               Value part,
                                               Value multicastMask) {
  Value partOffset = arith::MulIOp::create(
      b, part, wb.index(loadRows * blockK * elementBytes));
  Value firstRow =
      arith::AddIOp::create(b, boxFirstRow(tile, box),
                            arith::MulIOp::create(b, part, wb.index(loadRows)));
  nvgpu::TmaAsyncLoadOp::create(
      b,
      sharedView(
          {1, loadRows, blockK},
          arith::AddIOp::create(b, weightBoxOffset(stage, box), partOffset)),
      full, weightMap, ValueRange{k0, firstRow, tile.expert}, stage,
      multicastMask, Value());
}

/// This thread's cp.async copies of its gathered row chunks of K tile `k0`
/// into `stage`; invalid chunks copy no bytes and zero-fill their 16 bytes.
void WgmmaGroupedMatmulEmitter::gatherRows(
    const Tile &tile, Value stage, Value k0,
    ArrayRef<std::pair<Value, Value>> sources) {
  int64_t rowsPerPass = loaders / (kSwizzleBytes / kCopyBytes);
  Value kIndex = arith::AddIOp::create(
      b, k0,
      arith::MulIOp::create(b, tile.chunk,
                            wb.index(kCopyBytes / elementBytes)));
  Value kValid = wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k));
  Value column = wb.select(kValid, kIndex, wb.index(0));
  // The stage's row tile: its view for nvgpu's copies, or its shared address
  // and the token rows' global one for the copies under rowPolicy.
  Value rowTile, rows;
  if (rowPolicy) {
    rowTile = sharedAddress(rowTileOffset(stage));
    rows = arith::IndexCastOp::create(
        b, b.getI64Type(),
        memref::ExtractAlignedPointerAsIndexOp::create(b, input));
  } else {
    rowTile = sharedView({tileRows, blockK}, rowTileOffset(stage));
  }
  for (auto [pass, source] : llvm::enumerate(sources)) {
    Value tileRow =
        arith::AddIOp::create(b, tile.chunkRow, wb.index(pass * rowsPerPass));
    copyRowChunk(tile, rowTile, rows, tileRow, source.first, column,
                 arith::AndIOp::create(b, source.second, kValid));
  }
}

/// This thread's cp.async of kCopyBytes of token row `token` from element
/// `column` to its chunk of row `tileRow` of the row tile `rowTile`,
/// zero-filled unless `valid`: without a policy (nvgpu's; `rowTile` the
/// tile's view), or under `rowPolicy` (`rowTile` the tile's shared address,
/// `rows` the address of `input`'s [T, K] token rows, K elements apart).
void WgmmaGroupedMatmulEmitter::copyRowChunk(const Tile &tile, Value rowTile,
                                             Value rows, Value tileRow,
                                             Value token, Value column,
                                             Value valid) {
  int64_t chunkElements = kCopyBytes / elementBytes;
  if (!rowPolicy) {
    nvgpu::DeviceAsyncCopyOp::create(
        b, nvgpu::DeviceAsyncTokenType::get(b.getContext()), rowTile,
        ValueRange{tileRow, tile.swizzledColumn}, input,
        ValueRange{token, column}, b.getIndexAttr(chunkElements),
        wb.select(valid, wb.index(chunkElements), wb.index(0)),
        b.getUnitAttr());
    return;
  }
  auto bytes = [&](Value elements) {
    return arith::IndexCastOp::create(
        b, b.getI64Type(),
        arith::MulIOp::create(b, elements, wb.index(elementBytes)));
  };
  Value target = arith::AddIOp::create(
      b, rowTile,
      bytes(arith::AddIOp::create(
          b, arith::MulIOp::create(b, tileRow, wb.index(blockK)),
          tile.swizzledColumn)));
  Value source = arith::AddIOp::create(
      b, rows,
      bytes(arith::AddIOp::create(
          b, arith::MulIOp::create(b, token, wb.index(k)), column)));
  copyAsync(b, target, source, wb.select(valid, wb.i32(kCopyBytes), wb.i32(0)),
            rowPolicy);
}

/// This thread's gathered chunks of all but its last `pendingGroups` K tiles
/// are in shared memory, ordered before the tensor cores' reads.
void WgmmaGroupedMatmulEmitter::awaitGathers(int64_t pendingGroups) {
  NVVM::CpAsyncWaitGroupOp::create(b, pendingGroups);
  fenceAsyncProxy();
}

/// Orders this thread's shared-memory writes before the async proxy's
/// (wgmma's) reads that a barrier releases.
void WgmmaGroupedMatmulEmitter::fenceAsyncProxy() {
  NVVM::FenceProxyOp::create(
      b,
      NVVM::ProxyKindAttr::get(b.getContext(), NVVM::ProxyKind::async_shared),
      NVVM::SharedSpaceAttr::get(b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
}

//===----------------------------------------------------------------------===//
// The ring
//===----------------------------------------------------------------------===//

/// The ring's count of the split's K tile `step`: its stage and barrier
/// phases run on across the block's tiles.
Value WgmmaGroupedMatmulEmitter::ringCount(const Tile &tile, Value step) {
  return tile.ringBase
             ? arith::AddIOp::create(b, tile.ringBase, step).getResult()
             : step;
}

Value WgmmaGroupedMatmulEmitter::stageOf(const Tile &tile, Value step) {
  return ring.stageOf(wb, ringCount(tile, step));
}

/// Parity of the phase of its stage's barrier that K tile `step` is at
/// (`round` rounds of the ring later).
Value WgmmaGroupedMatmulEmitter::parityOf(const Tile &tile, Value step,
                                          int64_t round) {
  return ring.parityOf(wb, ringCount(tile, step), round);
}

void WgmmaGroupedMatmulEmitter::waitFull(const Tile &tile, Value step) {
  nvgpu::MBarrierTryWaitParityOp::create(b, full, parityOf(tile, step, 0),
                                         wb.index(kMbarrierWaitTicks),
                                         stageOf(tile, step));
}

//===----------------------------------------------------------------------===//
// The MMAs
//===----------------------------------------------------------------------===//

/// The wgmma descriptors of stage 0's row tile and weight tile.
void WgmmaGroupedMatmulEmitter::setUpDescriptors(Tile &tile) {
  Value sharedAddress = arith::IndexCastOp::create(
      b, b.getI64Type(),
      memref::ExtractAlignedPointerAsIndexOp::create(b, sharedBase));
  tile.rowDescriptors = kSwizzled128KMajor.build(b, sharedAddress);
  tile.weightDescriptors = arith::AddIOp::create(
      b, tile.rowDescriptors,
      arith::ConstantOp::create(
          b, b.getI64IntegerAttr(
                 SharedMatrixDescriptor::advance(ring.stages * rowTileBytes))));
}

/// The wgmmas of K tile `step` (in its stage) for the rows of consumer
/// warpgroup `consumer` ([64 c, 64 c + 64) of the row tile), chained on
/// `sum` and committed as one group. With `overwrite`, the first wgmma
/// overwrites the accumulators (scale-d 0).
Value WgmmaGroupedMatmulEmitter::multiplyStage(const Tile &tile, Value step,
                                               Value consumer, Value sum,
                                               bool overwrite) {
  auto i64 = [&](Value indexValue) -> Value {
    return arith::IndexCastOp::create(b, b.getI64Type(), indexValue);
  };
  Value stage = stageOf(tile, step);
  Value rowDescriptor = arith::AddIOp::create(
      b, tile.rowDescriptors,
      i64(arith::AddIOp::create(
          b,
          arith::MulIOp::create(
              b, stage,
              wb.index(SharedMatrixDescriptor::advance(rowTileBytes))),
          arith::MulIOp::create(b, consumer,
                                wb.index(SharedMatrixDescriptor::advance(
                                    kWgmmaRows * blockK * elementBytes))))));
  Value weightDescriptor = arith::AddIOp::create(
      b, tile.weightDescriptors,
      i64(arith::MulIOp::create(
          b, stage,
          wb.index(SharedMatrixDescriptor::advance(weightTileBytes)))));
  auto accumulatorType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(blockN / 2, b.getF32Type()));
  auto shape =
      NVVM::MMAShapeAttr::get(b.getContext(), kWgmmaRows, blockN, wgmmaK);
  NVVM::WGMMATypes wgmmaType = isa<Float8E4M3FNType>(elementType)
                                   ? NVVM::WGMMATypes::e4m3
                               : elementType.isBF16() ? NVVM::WGMMATypes::bf16
                                                      : NVVM::WGMMATypes::f16;
  // Accumulators are touched only by the wgmmas from here to the wait, so
  // they chain without a register round trip.
  NVVM::WgmmaFenceAlignedOp::create(b);
  for (int64_t kk = 0; kk < blockK / wgmmaK; ++kk) {
    // A wgmma's K step advances 32 bytes inside the swizzle atom.
    Value advance = arith::ConstantOp::create(
        b, b.getI64IntegerAttr(
               SharedMatrixDescriptor::advance(kk * kWgmmaKBytes)));
    sum = NVVM::WgmmaMmaAsyncOp::create(
        b, accumulatorType, sum,
        arith::AddIOp::create(b, rowDescriptor, advance),
        arith::AddIOp::create(b, weightDescriptor, advance), shape, wgmmaType,
        wgmmaType, NVVM::WGMMATypes::f32,
        overwrite && kk == 0 ? NVVM::WGMMAScaleOut::zero
                             : NVVM::WGMMAScaleOut::one,
        NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row,
        NVVM::MMALayout::col, NVVM::MMAIntOverflowAttr());
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  return sum;
}

/// The first weight row (of N) of the tile's weight box `box`: gated, the
/// gate rows and then the up rows of the tile's output columns.
Value WgmmaGroupedMatmulEmitter::boxFirstRow(const Tile &tile, int64_t box) {
  return arith::AddIOp::create(
      b,
      gated ? tile.firstColumn
            : arith::MulIOp::create(b, tile.columnTile, wb.index(blockN)),
      wb.index(box * columns));
}

/// The wgmmas of K tile `step`, chained on the carried sums (overwriting
/// them when `first`), then `afterStep`; with weight blocks, from zero and,
/// once done, `afterStep` and the promotion into the sums times the scales
/// carried for this K tile, while the next K tile's scales load.
Accumulation WgmmaGroupedMatmulEmitter::multiplyScaled(
    const Tile &tile, Value step, Value consumer, const Accumulation &carried,
    bool first, function_ref<void(Value, bool)> afterStep) {
  if (!blockScaled) {
    Value sums = multiplyStage(tile, step, consumer, carried.sums, first);
    afterStep(step, first);
    return {sums, {}};
  }
  Value partials = multiplyStage(
      tile, step, consumer, LLVM::UndefOp::create(b, carried.sums.getType()),
      /*overwrite=*/true);
  SmallVector<Value> next =
      loadBlockScales(tile, arith::AddIOp::create(b, step, wb.index(1)));
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  // The stage is read: free it (or refill the ring) before the promotion,
  // which needs only registers.
  afterStep(step, first);
  return {applyScales(first ? Value() : carried.sums, partials,
                      blockScalesOf(carried.scales)),
          next};
}

/// The split's K tiles for consumer warpgroup `consumer`: per K tile, wait
/// for its stage, multiply, then `afterStep` (K tile, whether it is the
/// first; with weight blocks, before the promotion). The first is peeled, its
/// first wgmma overwriting an undefined struct (scale-d 0), so that no move
/// ever initialises the accumulators (ptxas would fence the wgmmas for it,
/// C7519).
Value WgmmaGroupedMatmulEmitter::accumulate(
    const Tile &tile, Value consumer,
    function_ref<void(Value, bool)> afterStep) {
  auto accumulatorType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(blockN / 2, b.getF32Type()));
  auto multiply = [&](Value step, const Accumulation &carried, bool first) {
    waitFull(tile, step);
    return multiplyScaled(tile, step, consumer, carried, first, afterStep);
  };
  Accumulation start{LLVM::UndefOp::create(b, accumulatorType), {}};
  if (blockScaled)
    start.scales = loadBlockScales(tile, wb.index(0));
  Accumulation first = multiply(wb.index(0), start, /*first=*/true);
  SmallVector<Value> inits{first.sums};
  llvm::append_range(inits, first.scales);
  return wb.loop(
      wb.index(1), tile.numSteps, inits,
      [&](Value step, ValueRange carried) -> SmallVector<Value> {
        Accumulation next =
            multiply(step, {carried[0], llvm::to_vector(carried.drop_front())},
                     /*first=*/false);
        SmallVector<Value> results{next.sums};
        llvm::append_range(results, next.scales);
        return results;
      })[0];
}

//===----------------------------------------------------------------------===//
// FP8 scales
//===----------------------------------------------------------------------===//

/// The input-scale rows of the thread's accumulator rows: their tokens
/// (gathered rows) or sorted rows; rows outside the block read row 0.
void WgmmaGroupedMatmulEmitter::setUpScaleRows(Tile &tile) {
  Value laneRow = AccumulatorFragment::laneRow(wb, warp, lane);
  for (int64_t half = 0; half < 2; ++half) {
    Value rowInBlock = arith::AddIOp::create(b, laneRow, wb.index(half * 8));
    if (tokenInput) {
      auto [slot, routed] = slotOf(tile, rowInBlock);
      tile.scaleRows[half] =
          wb.select(routed, arith::DivUIOp::create(b, slot, wb.index(slots)),
                    wb.index(0));
      continue;
    }
    Value inBlock =
        wb.cmpi(arith::CmpIPredicate::ult, rowInBlock, wb.index(blockRows));
    tile.scaleRows[half] = arith::AddIOp::create(
        b, tile.firstRow, wb.select(inBlock, rowInBlock, wb.index(0)));
  }
}

/// The input scale of the thread's accumulator row `half` in K block
/// `kBlock`.
Value WgmmaGroupedMatmulEmitter::loadRowScale(const Tile &tile, int64_t half,
                                              Value kBlock) {
  return wb.load(inputScales, {tile.scaleRows[half], kBlock});
}

/// With weight blocks, the scales of the split's K tile `step`: the thread's
/// two row scales, then one weight scale per box (a box lies in one 128-row
/// block). A step past the split's last K tile (the last step's prefetch)
/// reads the last K tile's.
SmallVector<Value> WgmmaGroupedMatmulEmitter::loadBlockScales(const Tile &tile,
                                                              Value step) {
  Value kBlock =
      arith::MinUIOp::create(b, arith::AddIOp::create(b, tile.firstStep, step),
                             wb.index(numKTiles - 1));
  SmallVector<Value> loaded;
  for (int64_t half = 0; half < 2; ++half)
    loaded.push_back(loadRowScale(tile, half, kBlock));
  for (int64_t box = 0; box < numBoxes; ++box) {
    Value scaleRow = arith::DivUIOp::create(
        b, boxFirstRow(tile, box), wb.index(quantization.getBlockSize()));
    // A block tile's column tiles past the columns (a ragged last group)
    // multiply zeros; their scales are read in bounds.
    if (columnTilesPerTile > 1)
      scaleRow = arith::MinUIOp::create(
          b, scaleRow,
          wb.index(cast<MemRefType>(weightScales.getType()).getDimSize(1) - 1));
    loaded.push_back(wb.load(weightScales, {tile.expert, scaleRow, kBlock}));
  }
  return loaded;
}

/// The scale of each of the thread's accumulators from loadBlockScales'
/// values.
SumScales WgmmaGroupedMatmulEmitter::blockScalesOf(ValueRange loaded) {
  SumScales scales{{loaded[0], loaded[1]}, {}};
  for (int64_t block = 0; block < blockN / 8; ++block)
    scales.columns.append(2, loaded[2 + block * 8 / boxRows]);
  return scales;
}

/// With channel or tensor weight scales, the scales of the thread's whole
/// sums.
SumScales WgmmaGroupedMatmulEmitter::loadWholeSumScales(const Tile &tile) {
  SumScales scales;
  for (int64_t half = 0; half < 2; ++half)
    scales.rows[half] = loadRowScale(tile, half, wb.index(0));
  if (quantization.getWeights() == WeightScaling::tensor) {
    scales.columns.append(blockN / 4, wb.load(weightScales, {tile.expert}));
    return scales;
  }
  Value laneColumn = AccumulatorFragment::laneColumn(wb, lane);
  int64_t lastRow = (gated ? 2 * columns : columns) - 1;
  for (int64_t block = 0; block < blockN / 8; ++block) {
    Value firstRow = boxFirstRow(tile, block * 8 / boxRows);
    for (int64_t i = 0; i < 2; ++i) {
      Value row = arith::AddIOp::create(
          b, firstRow,
          arith::AddIOp::create(b, laneColumn,
                                wb.index(block * 8 % boxRows + i)));
      // Columns past N (a ragged last tile) read the last row's scale.
      scales.columns.push_back(wb.load(
          weightScales,
          {tile.expert, arith::MinUIOp::create(b, row, wb.index(lastRow))}));
    }
  }
  return scales;
}

/// `sums` + `partials` x (row scale x column scale), register by register
/// (`partials` x the scales when `sums` is null).
Value WgmmaGroupedMatmulEmitter::applyScales(Value sums, Value partials,
                                             const SumScales &scales) {
  Value result = partials;
  for (int64_t block = 0; block < blockN / 8; ++block)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t i = 0; i < 2; ++i) {
        int64_t index = AccumulatorFragment::registerOf(block, half, i);
        Value scale = arith::MulFOp::create(b, scales.rows[half],
                                            scales.columns[2 * block + i]);
        Value partial = LLVM::ExtractValueOp::create(b, partials, index);
        // One fused multiply-add per accumulator: the promotion runs while
        // the tensor cores wait, once per K tile.
        Value value =
            sums ? math::FmaOp::create(
                       b, partial, scale,
                       LLVM::ExtractValueOp::create(b, sums, index))
                       .getResult()
                 : arith::MulFOp::create(b, partial, scale).getResult();
        result = LLVM::InsertValueOp::create(b, result, value, index);
      }
  return result;
}

//===----------------------------------------------------------------------===//
// The roles
//===----------------------------------------------------------------------===//

/// Every thread loads and multiplies, each column tile of the block's tile
/// in turn.
void WgmmaGroupedMatmulEmitter::emitPlainLoop(const Tile &tile) {
  GatherSources sources;
  if (tokenInput)
    sources = gatherSources(tile);
  forEachColumnTile(tile, [&](const Tile &column) {
    // Every thread refills the ring: all must be done with the previous
    // column tile's stages first.
    if (columnTilesPerTile > 1)
      wb.ifThen(
          wb.cmpi(arith::CmpIPredicate::ne, column.columnTile, tile.columnTile),
          [&] { gpu::BarrierOp::create(b); });
    return multiplyPlain(column, sources);
  });
}

/// One column tile's K loop: stages 0..S-2 in flight, then per K tile: wait
/// for it, multiply, let the previous tile's wgmmas finish, and after a
/// block barrier refill the stage they read.
Value WgmmaGroupedMatmulEmitter::multiplyPlain(const Tile &tile,
                                               const GatherSources &sources) {
  // Every thread commits one cp.async group per call so that the group
  // counts stay uniform.
  auto issue = [&](Value step) {
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, step, tile.numSteps),
              [&] { loadStage(tile, step, sources); });
    if (tokenInput)
      NVVM::CpAsyncCommitGroupOp::create(b);
  };
  for (int64_t step = 0; step + 1 < ring.stages; ++step)
    issue(wb.index(step));
  if (tokenInput)
    awaitGathers(ring.stages - 2);
  gpu::BarrierOp::create(b);
  Value consumer = arith::DivUIOp::create(b, tid, wb.index(kWarpgroupThreads));
  Value accumulators = accumulate(tile, consumer, [&](Value step, bool) {
    // The previous step's group is done in this warp; after the barrier in
    // all, so its stage takes K tile step + stages - 1.
    NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
    if (tokenInput)
      awaitGathers(ring.stages - 3);
    gpu::BarrierOp::create(b);
    issue(arith::AddIOp::create(b, step, wb.index(ring.stages - 1)));
  });
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  return accumulators;
}

/// Warp-specialized: the producer warpgroups load, the others multiply (the
/// consumers keep the thread numbering of the kernel without a producer).
void WgmmaGroupedMatmulEmitter::emitWarpSpecialized(const Tile &tile) {
  // The warpgroup index, broadcast from lane 0 so that ptxas sees the role
  // branches as warp-uniform: wgmma in a path it thinks divergent gets
  // serialized (C7520).
  Value warpgroupIndex = wb.toIndex(
      gpu::ShuffleOp::create(
          b,
          wb.toI32(arith::DivUIOp::create(b, tid, wb.index(kWarpgroupThreads))),
          wb.i32(0), wb.i32(32),
          gpu::ShuffleModeAttr::get(b.getContext(), gpu::ShuffleMode::IDX))
          .getShuffleResult());
  auto setMaxRegisters = [&](int64_t RegisterSplit::*count,
                             NVVM::SetMaxRegisterAction action) {
    if (registerSplit)
      NVVM::SetMaxRegisterOp::create(
          b, b.getI32IntegerAttr(*registerSplit.*count),
          NVVM::SetMaxRegisterActionAttr::get(b.getContext(), action));
  };
  wb.ifThen(
      wb.cmpi(arith::CmpIPredicate::uge, warpgroupIndex, wb.index(warpgroups)),
      [&] {
        // Every thread of the warpgroup gives its registers back (the
        // instruction is warpgroup-aligned); only threads that load wait
        // on `empty`: a parity wait is ambiguous once the barrier has moved
        // on two phases, which an idle thread could let happen (and then
        // wait forever). Gathering threads cannot fall behind: every K tile
        // needs their arrival on `full`.
        setMaxRegisters(&RegisterSplit::producer,
                        NVVM::SetMaxRegisterAction::decrease);
        if (tokenInput || packed)
          emitProducer(tile);
        else
          wb.ifThen(leader, [&] { emitProducer(tile); });
      });
  wb.ifThen(
      wb.cmpi(arith::CmpIPredicate::ult, warpgroupIndex, wb.index(warpgroups)),
      [&] {
        setMaxRegisters(&RegisterSplit::consumer,
                        NVVM::SetMaxRegisterAction::increase);
        emitConsumer(tile, warpgroupIndex);
      });
}

/// The producer refills a stage once `empty` says the consumers are done
/// with it. Gathering threads report their rows on `full` `lag` K tiles
/// later, after their own cp.async wait and proxy fence, which keeps lag + 1
/// tiles of gathers in flight per thread (lag = stages - 2 leaves the ring a
/// free stage, so neither side waits on the other forever).
void WgmmaGroupedMatmulEmitter::emitProducer(const Tile &tile) {
  GatherSources sources;
  if (tokenInput)
    sources = gatherSources(tile);
  auto produceColumn = [&](const Tile &column) {
    if (packed)
      producePacked(column, sources);
    else
      produce(column, sources);
  };
  if (columnTilesPerTile == 1) {
    produceColumn(tile);
    return;
  }
  wb.loop(wb.index(0), wb.index(columnTilesPerTile),
          [&](Value index) { produceColumn(columnTileOf(tile, index)); });
}

/// Waits until the consumers are done with the stage K tile `step` takes
/// (from the ring's second round on).
void WgmmaGroupedMatmulEmitter::waitEmpty(const Tile &tile, Value step) {
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::uge, ringCount(tile, step),
                    wb.index(ring.stages)),
            [&] {
              nvgpu::MBarrierTryWaitParityOp::create(
                  b, empty, parityOf(tile, step, -1),
                  wb.index(kMbarrierWaitTicks), stageOf(tile, step));
            });
}

/// A consumer warp's arrival (from lane 0, after the warp's wgmma wait) on
/// `empty` of `stage`, and on the peer block's when the peer's producer
/// fills this block's stages too.
void WgmmaGroupedMatmulEmitter::freeStage(const Tile &tile, Value stage) {
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, lane, wb.index(0)), [&] {
    nvgpu::MBarrierArriveOp::create(b, empty, stage);
    if (tile.multicast)
      wb.ifThen(tile.multicast, [&] { arrivePeerEmpty(stage); });
  });
}

/// A warp's arrival on the peer block's `empty` barrier of `stage`, once the
/// warp's wgmmas are done with this block's copy of it.
void WgmmaGroupedMatmulEmitter::arrivePeerEmpty(Value stage) {
  auto sharedPointer =
      LLVM::LLVMPointerType::get(b.getContext(), kSharedAddressSpace);
  auto clusterPointer = LLVM::LLVMPointerType::get(
      b.getContext(),
      static_cast<unsigned>(NVVM::NVVMMemorySpace::SharedCluster));
  Value address = nvgpu::MBarrierGetOp::create(b, b.getI32Type(), empty, stage);
  Value local = LLVM::IntToPtrOp::create(b, sharedPointer, address);
  Value remote =
      NVVM::MapaOp::create(b, clusterPointer, local, wb.toI32(peerRank));
  // CTA scope, as CUTLASS's cluster barriers arrive: what the arrival
  // orders are wgmma reads that the wait already completed, and a cluster
  // scope's fence would wait for this thread's prefetched scale loads.
  NVVM::MBarrierArriveOp::create(
      b, Type(), remote, Value(),
      NVVM::MemScopeKindAttr::get(b.getContext(), NVVM::MemScopeKind::CTA));
}

/// The producer's K loop of one column tile.
void WgmmaGroupedMatmulEmitter::produce(const Tile &tile,
                                        const GatherSources &sources) {
  int64_t lag = ring.stages - 2;
  auto reportRows = [&](Value step) {
    nvgpu::MBarrierArriveOp::create(b, full, stageOf(tile, step));
  };
  wb.loop(wb.index(0), tile.numSteps, [&](Value step) {
    waitEmpty(tile, step);
    loadStage(tile, step, sources);
    if (!tokenInput)
      return;
    NVVM::CpAsyncCommitGroupOp::create(b);
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::uge, step, wb.index(lag)), [&] {
      awaitGathers(lag);
      reportRows(arith::SubIOp::create(b, step, wb.index(lag)));
    });
  });
  if (!tokenInput)
    return;
  awaitGathers(0);
  Value first = arith::SubIOp::create(
      b, arith::MaxSIOp::create(b, tile.numSteps, wb.index(lag)),
      wb.index(lag));
  wb.loop(first, tile.numSteps, [&](Value step) { reportRows(step); });
}

/// MXFP4: every producer thread runs `lag` K tiles past the split's. K tile
/// `step` first waits for its stage and has its loads issued (the leader's
/// TMA of the packed weights on `staged`, the rows); `lag` tiles later the
/// thread decodes its share of the packed tile into the stage's weight tile
/// and reports the stage on `full`, with its gathered rows. The thread's
/// weight scales of a K tile load one iteration before its decode, at the
/// end of the previous one, and ride to it in registers: carried further,
/// ptxas moves them at every back edge, which waits for the loads.
void WgmmaGroupedMatmulEmitter::producePacked(const Tile &tile,
                                              const GatherSources &sources) {
  int64_t lag = ring.stages - 2;
  SmallVector<Value> init(blockN / decodeRowsPerPass, wb.i32(0));
  Value lastStep = arith::SubIOp::create(b, tile.numSteps, wb.index(1));
  wb.loop(
      wb.index(0), arith::AddIOp::create(b, tile.numSteps, wb.index(lag)), init,
      [&](Value step, ValueRange scales) -> SmallVector<Value> {
        wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, step, tile.numSteps), [&] {
          waitEmpty(tile, step);
          loadStage(tile, step, sources);
        });
        // One cp.async group per K tile, empty past the split, keeps the
        // group counts uniform.
        if (tokenInput)
          NVVM::CpAsyncCommitGroupOp::create(b);
        wb.ifThen(wb.cmpi(arith::CmpIPredicate::uge, step, wb.index(lag)), [&] {
          Value decoded = arith::SubIOp::create(b, step, wb.index(lag));
          if (tokenInput)
            NVVM::CpAsyncWaitGroupOp::create(b, lag);
          nvgpu::MBarrierTryWaitParityOp::create(
              b, staged, parityOf(tile, decoded, 0),
              wb.index(kMbarrierWaitTicks), stageOf(tile, decoded));
          decodeStage(tile, decoded, scales);
          fenceAsyncProxy();
          nvgpu::MBarrierArriveOp::create(b, full, stageOf(tile, decoded));
        });
        // The next iteration decodes K tile step + 1 - lag (clamped into
        // the split: before it and past it, the values go unused).
        Value next = arith::SubIOp::create(
            b,
            arith::MaxUIOp::create(
                b, arith::AddIOp::create(b, step, wb.index(1)), wb.index(lag)),
            wb.index(lag));
        return loadMxScales(tile, arith::MinUIOp::create(b, next, lastStep));
      });
}

/// The e8m0 weight scales of the rows and K block this thread decodes in K
/// tile `step` (decodeStage), zero-extended to i32 and clamped into the
/// scales (scaleValidity says which are real). They ride in registers until
/// the decode, untouched: any use would wait for the load there.
SmallVector<Value> WgmmaGroupedMatmulEmitter::loadMxScales(const Tile &tile,
                                                           Value step) {
  auto scalesType = cast<MemRefType>(weightScales.getType());
  int64_t rowsOfN = scalesType.getDimSize(1),
          kBlocks = scalesType.getDimSize(2);
  Value kBlock = arith::MinUIOp::create(b, mxScaleBlock(tile, step),
                                        wb.index(kBlocks - 1));
  SmallVector<Value> scales;
  for (int64_t pass = 0; pass < blockN / decodeRowsPerPass; ++pass) {
    Value n = arith::MinUIOp::create(b, mxScaleRow(tile, pass),
                                     wb.index(rowsOfN - 1));
    Value code = wb.load(weightScales, {tile.expert, n, kBlock});
    scales.push_back(arith::ExtUIOp::create(
        b, b.getI32Type(), arith::BitcastOp::create(b, b.getI8Type(), code)));
  }
  return scales;
}

/// The K block of the thread's chunk of K tile `step`.
Value WgmmaGroupedMatmulEmitter::mxScaleBlock(const Tile &tile, Value step) {
  int64_t blockSize = quantization.getBlockSize();
  Value chunk = arith::RemUIOp::create(b, loader, wb.index(kDecodeChunks));
  return arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, arith::AddIOp::create(b, tile.firstStep, step),
                            wb.index(blockK / blockSize)),
      arith::DivUIOp::create(
          b,
          arith::MulIOp::create(b, chunk, wb.index(kCopyBytes / elementBytes)),
          wb.index(blockSize)));
}

/// The row of N the thread decodes in pass `pass`: row `loader / 8 +
/// (loaders / 8) pass` of the tile's weight boxes.
Value WgmmaGroupedMatmulEmitter::mxScaleRow(const Tile &tile, int64_t pass) {
  int64_t tileRow = pass * decodeRowsPerPass;
  return arith::AddIOp::create(
      b, boxFirstRow(tile, tileRow / boxRows),
      arith::AddIOp::create(
          b, arith::DivUIOp::create(b, loader, wb.index(kDecodeChunks)),
          wb.index(tileRow % boxRows)));
}

/// Decodes this thread's share of the packed MXFP4 tile of K tile `step`
/// into its stage's weight tile: per pass, 8 values (one 32-bit word, the
/// even value in each byte's low nibble) of row `loader / 8 + (loaders / 8)
/// pass`, chunk `loader % 8`, stored as 16 bytes of bf16 in the 128-byte
/// swizzle TMA would have written (chunk c of row r at c ^ (r % 8)): a warp's
/// loads and stores each touch 128 contiguous bytes per row group, without
/// bank conflicts. An e2m1 code's sign and exponent-mantissa bits placed
/// in a bf16 read as 2^-126 times its value (code 1, 0.5, as a
/// subnormal); times 2^126, then times 2^(scale - 127), both exact.
void WgmmaGroupedMatmulEmitter::decodeStage(const Tile &tile, Value step,
                                            ValueRange scales) {
  Value stage = stageOf(tile, step);
  Type i32 = b.getI32Type();
  auto pairType = VectorType::get({2}, elementType);
  int64_t packedWords = blockK / 8, tileWords = blockK * elementBytes / 4;
  Value packedTile =
      sharedView({blockN * packedWords}, packedBoxOffset(stage, 0), i32);
  Value weightTile =
      sharedView({blockN * tileWords}, weightBoxOffset(stage, 0), i32);
  Value chunk = arith::RemUIOp::create(b, loader, wb.index(kDecodeChunks));
  Value firstRow = arith::DivUIOp::create(b, loader, wb.index(kDecodeChunks));
  Value swizzledChunk = arith::XOrIOp::create(
      b, chunk, arith::RemUIOp::create(b, firstRow, wb.index(kDecodeChunks)));
  auto splat = [&](int64_t bf16Bits) -> Value {
    return LLVM::BitcastOp::create(b, pairType,
                                   wb.i32(bf16Bits | bf16Bits << 16));
  };
  Value twoPow126 = splat(0x7E80);
  // Rows past N and K blocks past K decode TMA's zero fill: scale 2^0.
  auto scalesType = cast<MemRefType>(weightScales.getType());
  Value kValid = wb.cmpi(arith::CmpIPredicate::ult, mxScaleBlock(tile, step),
                         wb.index(scalesType.getDimSize(2)));
  // Every pass's packed word first: ptxas cannot tell the tiles apart and
  // would keep each load behind the previous pass's store.
  auto rowOf = [&](int64_t pass) -> Value {
    return arith::AddIOp::create(b, firstRow,
                                 wb.index(pass * decodeRowsPerPass));
  };
  SmallVector<Value> words;
  for (int64_t pass = 0, e = scales.size(); pass < e; ++pass)
    words.push_back(wb.load(
        packedTile,
        {arith::AddIOp::create(
            b, arith::MulIOp::create(b, rowOf(pass), wb.index(packedWords)),
            chunk)}));
  for (auto [pass, loaded, word] : llvm::enumerate(scales, words)) {
    Value valid = arith::AndIOp::create(
        b, kValid,
        wb.cmpi(arith::CmpIPredicate::ult, mxScaleRow(tile, pass),
                wb.index(scalesType.getDimSize(1))));
    Value scale = wb.select(valid, loaded, wb.i32(127));
    Value row = rowOf(pass);
    // 2^(scale - 127) as bf16: the exponent field, 2^-127 (subnormal) for
    // 0, NaN for 0xFF.
    Value scaleBits = wb.select(
        wb.cmpi(arith::CmpIPredicate::eq, scale, wb.i32(0)), wb.i32(0x40),
        wb.select(wb.cmpi(arith::CmpIPredicate::eq, scale, wb.i32(0xFF)),
                  wb.i32(0x7FC0), arith::ShLIOp::create(b, scale, wb.i32(7))));
    Value scalePair = LLVM::BitcastOp::create(
        b, pairType,
        arith::OrIOp::create(b, scaleBits,
                             arith::ShLIOp::create(b, scaleBits, wb.i32(16))));
    // Nibbles j and j + 4 (values j and j + 4 of the chunk) shifted to the
    // tops of the two 16-bit halves decode with one mask and shift for
    // both: sign bits 15 and 31, exponent-mantissa bits 6-8 and 22-24.
    SmallVector<Value> spread;
    for (int64_t j = 0; j < 4; ++j) {
      Value top = arith::ShLIOp::create(b, word, wb.i32(12 - 4 * j));
      Value pair = arith::OrIOp::create(
          b, arith::AndIOp::create(b, top, wb.i32(0x80008000)),
          arith::AndIOp::create(b, arith::ShRUIOp::create(b, top, wb.i32(6)),
                                wb.i32(0x01C001C0)));
      spread.push_back(arith::MulFOp::create(
          b,
          arith::MulFOp::create(b, LLVM::BitcastOp::create(b, pairType, pair),
                                twoPow126),
          scalePair));
    }
    // Back to K order: (v0, v1), (v2, v3), (v4, v5), (v6, v7).
    SmallVector<Value> pairs;
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t j = 0; j < 4; j += 2)
        pairs.push_back(LLVM::BitcastOp::create(
            b, i32,
            vector::ShuffleOp::create(b, spread[j], spread[j + 1],
                                      ArrayRef<int64_t>{half, half + 2})));
    Value decoded =
        vector::FromElementsOp::create(b, VectorType::get({4}, i32), pairs);
    Value at = arith::AddIOp::create(
        b, arith::MulIOp::create(b, row, wb.index(tileWords)),
        arith::MulIOp::create(b, swizzledChunk, wb.index(kCopyBytes / 4)));
    vector::StoreOp::create(b, decoded, weightTile, ValueRange{at},
                            /*nontemporal=*/false, llvm::Align(kCopyBytes));
  }
}

/// A consumer waits on `full`, multiplies, and frees the stage of the
/// previous K tile once its wgmmas are done (of the K tile itself with
/// block scales, whose wgmmas are waited for in full); each column tile of
/// the block's tile in turn.
void WgmmaGroupedMatmulEmitter::emitConsumer(const Tile &tile, Value consumer) {
  forEachColumnTile(tile, [&](const Tile &column) {
    Value accumulators =
        accumulate(column, consumer, [&](Value step, bool first) {
          // Block-scaled K tiles are waited for in full (before their
          // promotion): their own stage is free. Else the previous K tile's
          // is, once one group of wgmmas remains.
          Value done = stageOf(column, step);
          if (!blockScaled) {
            NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
            if (first)
              return;
            done = stageOf(column, arith::SubIOp::create(b, step, wb.index(1)));
          }
          freeStage(column, done);
        });
    NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
    // The block's next tile goes on in the ring: free the last stage too.
    if (column.ringBase && !blockScaled)
      freeStage(column, stageOf(column, arith::SubIOp::create(
                                            b, column.numSteps, wb.index(1))));
    return accumulators;
  });
}

//===----------------------------------------------------------------------===//
// The epilogue
//===----------------------------------------------------------------------===//

/// With channel or tensor weight scales, the sums times their scales.
Value WgmmaGroupedMatmulEmitter::scaleWholeSums(const Tile &tile,
                                                Value accumulators) {
  if (!fp8 || blockScaled)
    return accumulators;
  return applyScales(Value(), accumulators, loadWholeSumScales(tile));
}

/// The consumers' part from their accumulators: the split's partial sums,
/// the epilogue, or, with a fused quantization, the quantized output.
void WgmmaGroupedMatmulEmitter::finish(const Tile &tile, Value accumulators) {
  if (!tile.streamed) {
    finishTile(tile, accumulators);
    return;
  }
  // A part of fewer K tiles than the tile's is one of several.
  Value part =
      wb.cmpi(arith::CmpIPredicate::ne, tile.numSteps, wb.index(numKTiles));
  SmallVector<Value> added = wb.ifThenOr(
      part, {accumulators, arith::ConstantOp::create(b, b.getBoolAttr(true))},
      [&] { return sumParts(accumulators); });
  wb.ifThen(added[1], [&] { finishTile(tile, added[0]); });
}

/// The epilogue, or the split's partial sums, of the tile's whole sums.
void WgmmaGroupedMatmulEmitter::finishTile(const Tile &tile,
                                           Value accumulators) {
  Value laneRow = AccumulatorFragment::laneRow(wb, warp, lane);
  Value laneColumn = AccumulatorFragment::laneColumn(wb, lane);
  auto slotOfRow = [&](Value rowInBlock) { return slotOf(tile, rowInBlock); };
  accumulators = scaleWholeSums(tile, accumulators);
  if (reduction) {
    storePartials(wb,
                  {accumulators, laneRow, laneColumn, tile.firstRow,
                   tile.firstColumn, tile.split},
                  slotOfRow, partials, slotRows, op, config);
    return;
  }
  if (epilogueQuantize) {
    storeQuantized(tile, valuesToHold(tile, accumulators));
    return;
  }
  emitEpilogue(tile, accumulators, laneRow, laneColumn);
}

/// `sum` plus the bias of the tile's expert at weight row `column` +
/// `offset` when the op has one. Columns past the output, whose values are
/// never stored, read the last column's bias rather than past the buffer.
Value WgmmaGroupedMatmulEmitter::withBias(const Tile &tile, Value sum,
                                          Value column, int64_t offset) {
  if (!bias)
    return sum;
  Value row = arith::MinUIOp::create(b, column, wb.index(columns - 1));
  if (offset)
    row = arith::AddIOp::create(b, row, wb.index(offset));
  return arith::AddFOp::create(b, sum, wb.loadF32(bias, {tile.expert, row}));
}

/// The epilogue's value of the thread's accumulator `index`, of output
/// column `column`: the sum plus its bias, act(gate, up) when gated (the up
/// sum plus its bias), times the routed `weight` when given.
Value WgmmaGroupedMatmulEmitter::epilogueValue(const Tile &tile,
                                               Value accumulators,
                                               int64_t index, Value column,
                                               Value weight) {
  Value value = withBias(
      tile, LLVM::ExtractValueOp::create(b, accumulators, index), column, 0);
  if (gated)
    value = emitGatedPair(b, b.getLoc(), activation, swiglu, value,
                          withBias(tile,
                                   LLVM::ExtractValueOp::create(
                                       b, accumulators, index + blockN / 4),
                                   column, columns),
                          kEpilogueFastMath);
  if (weight)
    value = arith::MulFOp::create(b, value, weight);
  return value;
}

/// The epilogue on the accumulator registers: gated activation, routed
/// weight, and the store in the op's row order. A thread holds a pair of
/// columns in each 8-column block, of two rows 8 apart: stored directly,
/// each warp store writes 16 bytes of 8 rows. Staged (placeStaging), the
/// pairs go to shared memory once every consumer is done with the ring and
/// with the last tile's staging, and the consumers then store whole rows in
/// 16-byte chunks (storeStagedRows): a quarter of the store instructions,
/// each of whole 32-byte sectors.
void WgmmaGroupedMatmulEmitter::emitEpilogue(const Tile &tile,
                                             Value accumulators, Value laneRow,
                                             Value laneColumn) {
  Type f32 = b.getF32Type();
  Type outputElement = cast<MemRefType>(output.getType()).getElementType();
  auto pairType = VectorType::get({2}, f32);
  Value staging;
  if (stagingOffset) {
    syncConsumers();
    staging = sharedView({tileRows, stagingPitch}, wb.index(*stagingOffset),
                         outputElement);
  }
  for (int64_t half = 0; half < 2; ++half) {
    Value rowInBlock = arith::AddIOp::create(b, laneRow, wb.index(half * 8));
    Value slot, routed;
    std::tie(slot, routed) = slotOf(tile, rowInBlock);
    Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
    Value slotInToken = arith::RemUIOp::create(b, slot, wb.index(slots));
    wb.ifThen(routed, [&] {
      Value weight =
          weighted ? wb.load(routedWeights, {token, slotInToken}) : Value();
      for (int64_t block = 0; block < outputColumnsPerBlock / 8; ++block) {
        Value column = arith::AddIOp::create(
            b, tile.firstColumn,
            arith::AddIOp::create(b, laneColumn, wb.index(block * 8)));
        SmallVector<Value> values;
        for (int64_t i = 0; i < 2; ++i)
          values.push_back(epilogueValue(
              tile, accumulators,
              AccumulatorFragment::registerOf(block, half, i),
              arith::AddIOp::create(b, column, wb.index(i)), weight));
        if (columns % 2 == 0) {
          // Two neighbouring columns in one 4-byte store.
          Value pair = vector::FromElementsOp::create(b, pairType, values);
          if (outputElement != f32)
            pair = arith::TruncFOp::create(
                b, VectorType::get({2}, outputElement), pair);
          if (staging) {
            vector::StoreOp::create(
                b, pair, staging,
                {rowInBlock,
                 arith::AddIOp::create(b, laneColumn, wb.index(block * 8))},
                /*nontemporal=*/false, llvm::Align(4));
            continue;
          }
          SmallVector<Value> at = outputIndices(tile, rowInBlock, slot, column);
          wb.ifThen(
              wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
              [&] {
                // Even columns of even-length rows: the pair is aligned to
                // its size (the runtime checks the base alignment).
                vector::StoreOp::create(
                    b, pair, output, at, /*nontemporal=*/false,
                    llvm::Align(2 * outputElement.getIntOrFloatBitWidth() / 8));
              });
          continue;
        }
        SmallVector<Value> at = outputIndices(tile, rowInBlock, slot, column);
        for (int64_t i = 0; i < 2; ++i) {
          at.back() = arith::AddIOp::create(b, column, wb.index(i));
          wb.ifThen(
              wb.cmpi(arith::CmpIPredicate::ult, at.back(), wb.index(columns)),
              [&] { wb.storeF32(values[i], output, at); });
        }
      }
    });
  }
  if (staging)
    storeStagedRows(tile, staging);
}

/// The consumer warpgroups wait for each other (a producer's threads go
/// their own way).
void WgmmaGroupedMatmulEmitter::syncConsumers() {
  NVVM::BarrierOp::create(b, Type(), wb.i32(kConsumerBarrier),
                          wb.i32(warpgroups * kWarpgroupThreads),
                          NVVM::BarrierReductionAttr(), Value());
}

/// The staged output tile's routed rows, once every consumer has staged its
/// values: consumer thread t stores 16-byte chunks t, t + consumers, ... of
/// the block's rows, so that a warp's store covers whole rows.
void WgmmaGroupedMatmulEmitter::storeStagedRows(const Tile &tile,
                                                Value staging) {
  syncConsumers();
  Type outputElement = cast<MemRefType>(staging.getType()).getElementType();
  int64_t chunkElements =
      kStagedChunkBytes / (outputElement.getIntOrFloatBitWidth() / 8);
  int64_t chunksPerRow = outputColumnsPerBlock / chunkElements;
  int64_t consumerThreads = warpgroups * kWarpgroupThreads;
  auto chunkType = VectorType::get({chunkElements}, outputElement);
  for (int64_t first = 0; first < blockRows * chunksPerRow;
       first += consumerThreads) {
    // Rows need not hold a whole number of passes (96 columns: 12 chunks).
    Value chunkIndex = arith::AddIOp::create(b, tid, wb.index(first));
    Value rowInBlock =
        arith::DivUIOp::create(b, chunkIndex, wb.index(chunksPerRow));
    Value tileColumn = arith::MulIOp::create(
        b, arith::RemUIOp::create(b, chunkIndex, wb.index(chunksPerRow)),
        wb.index(chunkElements));
    Value column = arith::AddIOp::create(b, tile.firstColumn, tileColumn);
    auto [slot, routed] = slotOf(tile, rowInBlock);
    SmallVector<Value> at = outputIndices(tile, rowInBlock, slot, column);
    Value inColumns =
        wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns));
    wb.ifThen(arith::AndIOp::create(b, routed, inColumns), [&] {
      Value chunk = vector::LoadOp::create(
          b, chunkType, staging, {rowInBlock, tileColumn},
          /*nontemporal=*/false, llvm::Align(kStagedChunkBytes));
      vector::StoreOp::create(b, chunk, output, at, /*nontemporal=*/false,
                              llvm::Align(kStagedChunkBytes));
    });
  }
}

//===----------------------------------------------------------------------===//
// Stream-K
//===----------------------------------------------------------------------===//

/// A part of one of the last round's tiles: its sums go to the block's slot
/// of the workspace, then the part counts itself on its tile's counter, and
/// the block that counts last sums the tile's parts, from their slots
/// (block i + L p holds part p of tail tile i) in part order, so that the
/// sum does not depend on which block finishes last. No block waits for
/// another, so the grid need not be resident at once. Returns the sums and
/// whether this block finishes the tile.
SmallVector<Value> WgmmaGroupedMatmulEmitter::sumParts(Value accumulators) {
  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tailTile = arith::RemUIOp::create(b, blockId, tailTiles);
  storeStreamSums(accumulators, blockId);
  Value last = countPart(tailTile);
  auto slotOfPart = [&](Value part) -> Value {
    return arith::AddIOp::create(b, tailTile,
                                 arith::MulIOp::create(b, part, tailTiles));
  };
  Value sums = wb.ifThenOr(last, {accumulators}, [&]() -> SmallVector<Value> {
    Value first = addStreamSums(Value(), slotOfPart(wb.index(0)));
    return wb.loop(wb.index(1), tileParts, {first},
                   [&](Value part, ValueRange carried) -> SmallVector<Value> {
                     return {addStreamSums(carried[0], slotOfPart(part))};
                   });
  })[0];
  return {sums, last};
}

/// Counts this block's part on the counter of tail tile `tailTile`, once
/// every consumer thread's sums are stored; returns whether it counted last
/// (uniform over the consumers). Thread 0 counts between fences: the one
/// before releases the consumers' stores (ordered before it by their own
/// fences and the barrier), the one after acquires the other part's before
/// the barrier that hands its answer to the consumers.
Value WgmmaGroupedMatmulEmitter::countPart(Value tailTile) {
  LLVM::FenceOp::create(b, LLVM::AtomicOrdering::acq_rel, kDeviceScope);
  syncConsumers();
  Value counted = wb.ifThenOr(
      wb.cmpi(arith::CmpIPredicate::eq, tid, wb.index(0)),
      {arith::ConstantOp::create(b, b.getBoolAttr(false))},
      [&]() -> SmallVector<Value> {
        LLVM::FenceOp::create(b, LLVM::AtomicOrdering::acq_rel, kDeviceScope);
        Value address = arith::AddIOp::create(
            b,
            memref::ExtractAlignedPointerAsIndexOp::create(b, streamCounters),
            arith::MulIOp::create(b, tailTile, wb.index(4)));
        Value pointer = LLVM::IntToPtrOp::create(
            b, LLVM::LLVMPointerType::get(b.getContext()),
            arith::IndexCastOp::create(b, b.getI64Type(), address).getResult());
        Value before = LLVM::AtomicRMWOp::create(
            b, LLVM::AtomicBinOp::add, pointer, wb.i32(1),
            LLVM::AtomicOrdering::monotonic, kDeviceScope);
        LLVM::FenceOp::create(b, LLVM::AtomicOrdering::acq_rel, kDeviceScope);
        return {wb.cmpi(
            arith::CmpIPredicate::eq, before,
            wb.toI32(arith::SubIOp::create(b, tileParts, wb.index(1))))};
      })[0];
  // Thread 0's answer, to every consumer thread: an OR over the consumers'
  // barrier (nvvm.barrier reduces over barrier 0 only, the whole block's).
  std::string orBarrier =
      llvm::formatv("{ .reg .pred counted, second; setp.ne.u32 counted, $1, "
                    "0; bar.red.or.pred second, {0}, {1}, counted; selp.u32 "
                    "$0, 1, 0, second; }",
                    kConsumerBarrier, warpgroups * kWarpgroupThreads)
          .str();
  Value second =
      NVVM::InlinePtxOp::create(
          b, TypeRange{b.getI32Type()},
          ValueRange{arith::ExtUIOp::create(b, b.getI32Type(), counted)},
          ValueRange{}, orBarrier, Value())
          .getResult(0);
  return wb.cmpi(arith::CmpIPredicate::ne, second, wb.i32(0));
}

/// The workspace column of consumer thread `tid`'s sums `sum` .. `sum` + 3:
/// each 4-sum chunk of all threads lies together, so that a warp's
/// 16-byte accesses are contiguous.
Value WgmmaGroupedMatmulEmitter::streamSumsColumn(int64_t sum) {
  return arith::MulIOp::create(
      b,
      arith::AddIOp::create(
          b, wb.index(sum / 4 * warpgroups * kWarpgroupThreads), tid),
      wb.index(4));
}

void WgmmaGroupedMatmulEmitter::storeStreamSums(Value accumulators,
                                                Value slot) {
  auto chunkType = VectorType::get({4}, b.getF32Type());
  for (int64_t sum = 0; sum < blockN / 2; sum += 4) {
    SmallVector<Value> chunk;
    for (int64_t i = 0; i < 4; ++i)
      chunk.push_back(LLVM::ExtractValueOp::create(b, accumulators, sum + i));
    vector::StoreOp::create(
        b, vector::FromElementsOp::create(b, chunkType, chunk), streamSums,
        {slot, streamSumsColumn(sum)}, /*nontemporal=*/false, llvm::Align(16));
  }
}

/// `accumulators` plus the sums in the workspace slot `slot` (the slot's
/// sums when `accumulators` is null).
Value WgmmaGroupedMatmulEmitter::addStreamSums(Value accumulators, Value slot) {
  bool overwrite = !accumulators;
  if (overwrite)
    accumulators = LLVM::PoisonOp::create(
        b, LLVM::LLVMStructType::getLiteral(
               b.getContext(), SmallVector<Type>(blockN / 2, b.getF32Type())));
  auto chunkType = VectorType::get({4}, b.getF32Type());
  for (int64_t sum = 0; sum < blockN / 2; sum += 4) {
    Value chunk = vector::LoadOp::create(
        b, chunkType, streamSums, {slot, streamSumsColumn(sum)},
        /*nontemporal=*/false, llvm::Align(16));
    for (int64_t i = 0; i < 4; ++i) {
      Value value = vector::ExtractOp::create(b, chunk, i);
      if (!overwrite)
        value = arith::AddFOp::create(
            b, LLVM::ExtractValueOp::create(b, accumulators, sum + i), value);
      accumulators =
          LLVM::InsertValueOp::create(b, accumulators, value, sum + i);
    }
  }
  return accumulators;
}

//===----------------------------------------------------------------------===//
// The fused quantization
//===----------------------------------------------------------------------===//

/// Where the thread's value pair `position` of a block tile lies.
HeldPosition WgmmaGroupedMatmulEmitter::heldPosition(int64_t position) {
  int64_t perTile = outputColumnsPerBlock / 4;
  int64_t blockColumn =
      position / perTile * outputColumnsPerBlock + position % perTile / 2 * 8;
  return {position % 2, blockColumn,
          quantizeGroup ? blockColumn / quantizeGroup : 0};
}

/// Column tile `tile`'s epilogue values in HeldPosition order, each pair of
/// columns rounded to the op's output type as the unfused epilogue stores
/// it, so that the quantization reads what the quantize kernel would have.
HeldValues WgmmaGroupedMatmulEmitter::valuesToHold(const Tile &tile,
                                                   Value accumulators) {
  Type outputElement =
      cast<RankedTensorType>(op.getOutput().getType()).getElementType();
  Value laneFirstColumn = arith::AddIOp::create(
      b, tile.firstColumn, AccumulatorFragment::laneColumn(wb, lane));
  HeldValues held;
  for (int64_t block = 0; block < outputColumnsPerBlock / 8; ++block) {
    for (int64_t half = 0; half < 2; ++half) {
      SmallVector<Value> values;
      for (int64_t i = 0; i < 2; ++i)
        values.push_back(epilogueValue(
            tile, accumulators, AccumulatorFragment::registerOf(block, half, i),
            arith::AddIOp::create(b, laneFirstColumn, wb.index(block * 8 + i)),
            Value()));
      Value pair = vector::FromElementsOp::create(
          b, VectorType::get({2}, b.getF32Type()), values);
      if (!outputElement.isF32())
        pair = arith::TruncFOp::create(b, VectorType::get({2}, outputElement),
                                       pair);
      held.push_back(pair);
    }
  }
  return held;
}

/// The dynamic scale of a row's group from its held `pairs` (the first of
/// whose columns are `columns`): the amax of the columns inside the row
/// (NaN when any is NaN) over the four lanes that hold the row, floored
/// and divided by 448 as moe.quantize says.
Value WgmmaGroupedMatmulEmitter::groupScale(ArrayRef<Value> pairs,
                                            ArrayRef<Value> columns) {
  Type f32 = b.getF32Type();
  Value amax = wb.f32(0.0);
  for (auto [pair, column] : llvm::zip_equal(pairs, columns)) {
    Value values = math::AbsFOp::create(
        b, arith::ExtFOp::create(b, VectorType::get({2}, f32), pair));
    Value inside =
        wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(this->columns));
    for (int64_t i = 0; i < 2; ++i)
      amax = arith::MaximumFOp::create(
          b, amax,
          wb.select(inside, vector::ExtractOp::create(b, values, i),
                    wb.f32(0.0)));
  }
  // The lanes of a quad (lane / 4 the same) hold one row.
  for (int64_t offset = 1; offset < 4; offset *= 2)
    amax = arith::MaximumFOp::create(
        b, amax,
        gpu::ShuffleOp::create(b, amax, static_cast<int32_t>(offset),
                               static_cast<int32_t>(kWarpSize),
                               gpu::ShuffleMode::XOR)
            .getShuffleResult());
  return emitQuantizationScale(b, b.getLoc(), amax);
}

/// The block tile's held values quantized, from its last column tile
/// `tile`: per row and group, the scale (the static one, or groupScale),
/// e4m3(value / scale) for each held column inside the row, and the scale,
/// stored for the routed rows.
void WgmmaGroupedMatmulEmitter::storeQuantized(const Tile &tile,
                                               const HeldValues &held) {
  Value laneRow = AccumulatorFragment::laneRow(wb, warp, lane);
  Value tileFirstColumn = arith::SubIOp::create(
      b, tile.firstColumn,
      wb.index((columnTilesPerTile - 1) * outputColumnsPerBlock));
  Value laneFirstColumn = arith::AddIOp::create(
      b, tileFirstColumn, AccumulatorFragment::laneColumn(wb, lane));
  int64_t groups = heldPosition(held.size() - 1).group + 1;
  Value firstGroup =
      quantizeGroup
          ? arith::DivUIOp::create(b, tileFirstColumn, wb.index(quantizeGroup))
                .getResult()
          : wb.index(0);
  Value scaleLane =
      wb.cmpi(arith::CmpIPredicate::eq,
              arith::RemUIOp::create(b, lane, wb.index(4)), wb.index(0));
  // A static scale is every group's: the block tiles of the first columns
  // store it.
  if (!quantizeGroup)
    scaleLane = arith::AndIOp::create(
        b, scaleLane,
        wb.cmpi(arith::CmpIPredicate::eq, tileFirstColumn, wb.index(0)));
  Type f8 = b.getType<Float8E4M3FNType>();
  for (int64_t half = 0; half < 2; ++half) {
    Value rowInBlock = arith::AddIOp::create(b, laneRow, wb.index(half * 8));
    Value routed = slotOf(tile, rowInBlock).second;
    Value row = arith::AddIOp::create(b, tile.firstRow, rowInBlock);
    for (int64_t group = 0; group < groups; ++group) {
      SmallVector<Value> pairs, columns;
      for (auto [position, pair] : llvm::enumerate(held)) {
        HeldPosition at = heldPosition(position);
        if (at.half != half || at.group != group)
          continue;
        pairs.push_back(pair);
        columns.push_back(arith::AddIOp::create(b, laneFirstColumn,
                                                wb.index(at.blockColumn)));
      }
      Value scale = staticScale ? staticScale : groupScale(pairs, columns);
      wb.ifThen(routed, [&] {
        // A tile's groups past the columns (a tile wider than the row) have
        // no scale to store.
        Value groupIndex =
            arith::AddIOp::create(b, firstGroup, wb.index(group));
        Value storesScale = arith::AndIOp::create(
            b, scaleLane,
            wb.cmpi(arith::CmpIPredicate::ult, groupIndex,
                    wb.index(cast<MemRefType>(quantizedScales.getType())
                                 .getDimSize(1))));
        wb.ifThen(storesScale, [&] {
          wb.store(scale, quantizedScales, {row, groupIndex});
        });
        for (auto [pair, pairColumn] : llvm::zip_equal(pairs, columns)) {
          Value column = pairColumn;
          Value values = arith::ExtFOp::create(
              b, VectorType::get({2}, b.getF32Type()), pair);
          auto scaled = [&](int64_t i) -> Value {
            return arith::DivFOp::create(
                b, vector::ExtractOp::create(b, values, i), scale);
          };
          // The vector form puts its second operand first.
          Value bytes = NVVM::ConvertF32x2ToF8x2Op::create(
              b, VectorType::get({2}, b.getI8Type()), scaled(1), scaled(0),
              NVVM::FPRoundingMode::RN, NVVM::SaturationMode::SATFINITE,
              /*relu=*/false, f8);
          Value codes =
              arith::BitcastOp::create(b, VectorType::get({2}, f8), bytes);
          wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, column,
                            wb.index(this->columns)),
                    [&] {
                      vector::StoreOp::create(
                          b, codes, quantized, ValueRange{row, column},
                          /*nontemporal=*/false, llvm::Align(2));
                    });
        }
      });
    }
  }
}

} // namespace

void mlir::moe::detail::emitWgmmaGroupedMatmul(
    PlanBuilder &plan, OpBuilder &builder, GroupedMatmulOp op,
    GemmConfigAttr config, QuantizeOp epilogueQuantize, bool rowsEvictLast) {
  WgmmaGroupedMatmulEmitter(plan, builder, op, config, epilogueQuantize,
                            rowsEvictLast)
      .emit();
}
