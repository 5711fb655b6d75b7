//===- MoeToLoops.cpp - moe ops to loops over buffers ---------------------===//

#include "moe/Conversion/MoeToLoops/MoeToLoops.h"
#include "moe/Conversion/MoeCommon/Fp8Math.h"
#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/Conversion/MoeCommon/RoutingMath.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_CONVERTMOETOLOOPS
#include "moe/Conversion/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {

//===----------------------------------------------------------------------===//
// moe.gate
//===----------------------------------------------------------------------===//

/// Pattern: moe.gate(logits, bias) => for each token: fp32 scores, grouped
/// arg-max selection, weights.
struct GateToLoops : OpRewritePattern<GateOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GateOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    RouterAttr router = op.getRouter();
    auto logitsType = cast<RankedTensorType>(op.getLogits().getType());
    int64_t numExperts = logitsType.getDimSize(1);
    int64_t numGroups = router.getNumGroups();
    int64_t groupSize = numExperts / numGroups;
    int64_t topK = router.getTopK();

    Value logits = lb.toBuffer(op.getLogits());
    Value bias =
        op.getCorrectionBias() ? lb.toBuffer(op.getCorrectionBias()) : Value();
    Value numTokens = lb.dim(logits, 0);
    SmallVector<Value> dynamicTokens;
    if (logitsType.isDynamicDim(0))
      dynamicTokens.push_back(numTokens);
    Value weights = lb.alloc(op.getWeights().getType(), dynamicTokens);
    Value ids = lb.alloc(op.getIds().getType(), dynamicTokens);

    Type f32 = b.getF32Type(), i1 = b.getI1Type();
    Value scores = lb.scratch({numExperts}, f32);
    Value selection = lb.scratch({numExperts}, f32);
    Value chosen = lb.scratch({numExperts}, i1);
    Value partialSums = router.getScoring() == Scoring::softmax
                            ? lb.scratch({kSoftmaxSumLanes}, f32)
                            : Value();
    Value groupScores, groupKept;
    if (numGroups > 1) {
      groupScores = lb.scratch({numGroups}, f32);
      groupKept = lb.scratch({numGroups}, i1);
    }
    Value zeroIndex = lb.index(0), experts = lb.index(numExperts);
    Value trueValue = arith::ConstantIntOp::create(b, i1, 1);
    Value falseValue = arith::ConstantIntOp::create(b, i1, 0);

    lb.loop(zeroIndex, numTokens, [&](Value t) {
      emitScores(lb, router.getScoring(), logits, t, numExperts, scores,
                 partialSums);
      lb.loop(numExperts, [&](Value e) {
        Value score = lb.load(scores, e);
        if (bias)
          score = arith::AddFOp::create(b, score, lb.load(bias, e));
        lb.store(score, selection, e);
        lb.store(falseValue, chosen, e);
      });
      auto selectionAt = [&](Value e) { return lb.load(selection, e); };
      auto notChosen = [&](Value e) {
        return arith::XOrIOp::create(b, lb.load(chosen, e), trueValue)
            .getResult();
      };

      // Grouped routing: score each group by its two best experts, keep the
      // topk_groups best groups, and mark every expert outside them as
      // chosen so that the expert selection below skips it.
      if (numGroups > 1) {
        lb.loop(numGroups, [&](Value g) {
          Value first = arith::MulIOp::create(b, g, lb.index(groupSize));
          Value end = arith::AddIOp::create(b, first, lb.index(groupSize));
          std::pair<Value, Value> best = lb.argBest(
              first, end, selectionAt, [&](Value) { return trueValue; });
          std::pair<Value, Value> second =
              lb.argBest(first, end, selectionAt, [&](Value e) {
                return lb.cmpi(arith::CmpIPredicate::ne, e, best.first);
              });
          lb.store(arith::AddFOp::create(b, best.second, second.second),
                   groupScores, g);
          lb.store(falseValue, groupKept, g);
        });
        lb.loop(router.getTopkGroups(), [&](Value) {
          auto [group, value] = lb.argBest(
              zeroIndex, lb.index(numGroups),
              [&](Value g) { return lb.load(groupScores, g); },
              [&](Value g) {
                return arith::XOrIOp::create(b, lb.load(groupKept, g),
                                             trueValue)
                    .getResult();
              });
          lb.store(trueValue, groupKept, group);
        });
        lb.loop(numExperts, [&](Value e) {
          Value group = arith::DivUIOp::create(b, e, lb.index(groupSize));
          Value kept = lb.load(groupKept, group);
          lb.store(arith::XOrIOp::create(b, kept, trueValue), chosen, e);
        });
      }

      // The top_k best remaining experts, best first; a NaN score weighs 0.
      Value zero = lb.f32(0.0);
      SmallVector<Value> sum =
          lb.loop(zeroIndex, lb.index(topK), {zero},
                  [&](Value s, ValueRange carried) -> SmallVector<Value> {
                    auto [expert, value] =
                        lb.argBest(zeroIndex, experts, selectionAt, notChosen);
                    lb.store(trueValue, chosen, expert);
                    lb.store(lb.toI32(expert), ids, {t, s});
                    Value score = lb.load(scores, expert);
                    Value weight = lb.select(lb.isNaN(score), zero, score);
                    lb.store(weight, weights, {t, s});
                    return {arith::AddFOp::create(b, carried[0], weight)};
                  });

      Value denominator =
          router.getRenormalize()
              ? arith::AddFOp::create(b, sum[0], lb.f32(1e-20)).getResult()
              : Value();
      double scale = router.getRoutedScalingFactor().convertToDouble();
      if (denominator || scale != 1.0) {
        lb.loop(topK, [&](Value s) {
          Value weight = lb.load(weights, {t, s});
          if (denominator)
            weight = arith::DivFOp::create(b, weight, denominator);
          if (scale != 1.0)
            weight = arith::MulFOp::create(b, weight, lb.f32(scale));
          lb.store(weight, weights, {t, s});
        });
      }
      for (int64_t i = 0; i < router.getNumSharedExperts(); ++i) {
        Value slot = lb.index(topK + i);
        lb.store(lb.i32(numExperts + i), ids, {t, slot});
        lb.store(lb.f32(1.0), weights, {t, slot});
      }
    });
    rewriter.replaceOp(op, {lb.toTensor(op.getWeights().getType(), weights),
                            lb.toTensor(op.getIds().getType(), ids)});
    return success();
  }

  /// Writes the fp32 scores of row `t` of `logits` into `scores`.
  static void emitScores(LoopBuilder &lb, Scoring scoring, Value logits,
                         Value t, int64_t numExperts, Value scores,
                         Value partialSums) {
    ImplicitLocOpBuilder &b = lb.b;
    Location loc = b.getLoc();
    Value zeroIndex = lb.index(0), experts = lb.index(numExperts);
    if (scoring == Scoring::sigmoid) {
      lb.loop(numExperts, [&](Value e) {
        lb.store(emitRoutingSigmoid(b, loc, lb.loadF32(logits, {t, e})), scores,
                 e);
      });
      return;
    }
    // Softmax (RoutingMath.h): the max over the non-NaN logits, the
    // numerators, and the denominator summed in the order kSoftmaxSumLanes
    // fixes, which a warp reproduces.
    Value max = lb.loop(
        zeroIndex, experts, {lb.f32(-std::numeric_limits<float>::infinity())},
        [&](Value e, ValueRange carried) -> SmallVector<Value> {
          return {arith::MaximumFOp::create(
              b, carried[0],
              emitSoftmaxMaxOperand(b, loc, lb.loadF32(logits, {t, e})))};
        })[0];
    lb.fill(partialSums, lb.f32(0.0));
    Value lanes = lb.index(kSoftmaxSumLanes);
    lb.loop(numExperts, [&](Value e) {
      Value p = emitSoftmaxNumerator(b, loc, lb.loadF32(logits, {t, e}), max);
      lb.store(p, scores, e);
      Value lane = arith::RemUIOp::create(b, e, lanes);
      lb.store(arith::AddFOp::create(b, lb.load(partialSums, lane),
                                     emitSoftmaxSummand(b, loc, p)),
               partialSums, lane);
    });
    for (int64_t stride = 1; stride < kSoftmaxSumLanes; stride *= 2) {
      for (int64_t lane = 0; lane < kSoftmaxSumLanes; lane += 2 * stride) {
        Value left = lb.index(lane), right = lb.index(lane + stride);
        lb.store(arith::AddFOp::create(b, lb.load(partialSums, left),
                                       lb.load(partialSums, right)),
                 partialSums, left);
      }
    }
    Value sum = lb.load(partialSums, zeroIndex);
    lb.loop(numExperts, [&](Value e) {
      lb.store(arith::DivFOp::create(b, lb.load(scores, e), sum), scores, e);
    });
  }
};

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

/// Pattern: moe.route(ids) => counting sort of the slots by expert with
/// per-expert offsets padded to block_m.
struct RouteToLoops : OpRewritePattern<RouteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RouteOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    int64_t numExperts = op.getNumExperts(), blockM = op.getBlockM();
    auto idsType = cast<RankedTensorType>(op.getIds().getType());
    int64_t numSlots = idsType.getDimSize(1);

    Value ids = lb.toBuffer(op.getIds());
    Value numTokens = lb.dim(ids, 0);
    Value routedSlots = arith::MulIOp::create(b, numTokens, lb.index(numSlots));
    Value capacity = arith::AddIOp::create(b, routedSlots,
                                           lb.index(numExperts * (blockM - 1)));
    Value numBlocks = arith::CeilDivUIOp::create(b, capacity, lb.index(blockM));
    auto dynamicSize = [&](Value result, Value size) {
      return cast<RankedTensorType>(result.getType()).isDynamicDim(0)
                 ? SmallVector<Value>{size}
                 : SmallVector<Value>{};
    };
    Value sortedIds = lb.alloc(op.getSortedIds().getType(),
                               dynamicSize(op.getSortedIds(), capacity));
    Value expertIds = lb.alloc(op.getExpertIds().getType(),
                               dynamicSize(op.getExpertIds(), numBlocks));
    Value numPadded = lb.alloc(op.getNumPadded().getType());

    Type i32 = b.getI32Type();
    Value counts = lb.scratch({numExperts}, i32);
    Value cursors = lb.scratch({numExperts}, i32);
    Value zero = lb.i32(0), one = lb.i32(1);
    lb.fill(sortedIds, lb.toI32(routedSlots));
    lb.fill(expertIds, lb.i32(-1));
    lb.fill(counts, zero);

    // Visits every slot whose expert id is in range, in slot order.
    auto forEachRoutedSlot = [&](function_ref<void(Value, Value)> body) {
      lb.loop(lb.index(0), numTokens, [&](Value t) {
        lb.loop(numSlots, [&](Value s) {
          Value expert = lb.load(ids, {t, s});
          Value valid = lb.inRange(expert, zero, lb.i32(numExperts));
          lb.ifThen(valid, [&] {
            Value slot = arith::AddIOp::create(
                b, arith::MulIOp::create(b, t, lb.index(numSlots)), s);
            body(lb.toIndex(expert), slot);
          });
        });
      });
    };

    forEachRoutedSlot([&](Value expert, Value) {
      lb.store(arith::AddIOp::create(b, lb.load(counts, expert), one), counts,
               expert);
    });
    Value blockRows = lb.i32(blockM);
    Value total = lb.loop(
        lb.index(0), lb.index(numExperts), {zero},
        [&](Value e, ValueRange carried) -> SmallVector<Value> {
          Value offset = carried[0];
          lb.store(offset, cursors, e);
          Value blocks =
              arith::CeilDivUIOp::create(b, lb.load(counts, e), blockRows);
          Value firstBlock = arith::DivUIOp::create(b, offset, blockRows);
          Value endBlock = arith::AddIOp::create(b, firstBlock, blocks);
          lb.loop(
              lb.toIndex(firstBlock), lb.toIndex(endBlock),
              [&](Value block) { lb.store(lb.toI32(e), expertIds, block); });
          return {arith::AddIOp::create(
              b, offset, arith::MulIOp::create(b, blocks, blockRows))};
        })[0];
    lb.store(total, numPadded, {});
    forEachRoutedSlot([&](Value expert, Value slot) {
      Value row = lb.load(cursors, expert);
      lb.store(lb.toI32(slot), sortedIds, lb.toIndex(row));
      lb.store(arith::AddIOp::create(b, row, one), cursors, expert);
    });

    rewriter.replaceOp(op,
                       {lb.toTensor(op.getSortedIds().getType(), sortedIds),
                        lb.toTensor(op.getExpertIds().getType(), expertIds),
                        lb.toTensor(op.getNumPadded().getType(), numPadded)});
    return success();
  }
};

//===----------------------------------------------------------------------===//
// moe.grouped_matmul
//===----------------------------------------------------------------------===//

/// The loops of one moe.grouped_matmul over its operands' buffers: per
/// routed row, the fp32 dot product of each output column (scaled as the
/// op's quantization says) and the epilogue.
class GroupedMatmulLoops {
public:
  GroupedMatmulLoops(GroupedMatmulOp op, LoopBuilder &lb)
      : op(op), lb(lb), b(lb.b), quantization(op.getQuantizationAttr()),
        input(lb.toBuffer(op.getInput())),
        weights(lb.toBuffer(op.getWeights())),
        sortedIds(lb.toBuffer(op.getSortedIds())),
        expertIds(lb.toBuffer(op.getExpertIds())),
        numPadded(lb.toBuffer(op.getNumPadded())),
        routedWeights(optionalBuffer(op.getRoutedWeights())),
        bias(optionalBuffer(op.getBias())),
        inputScales(optionalBuffer(op.getInputScales())),
        weightScales(optionalBuffer(op.getWeightScales())) {}

  /// Allocates the output, zero-filled, and computes every routed row.
  Value emit() {
    int64_t numSlots = op.getNumSlots(), numExperts = op.getNumStoredExperts();
    bool slotOutput = op.getOutputOrder() == RowOrder::slot;
    Value capacity = lb.dim(sortedIds, 0);
    Value numTokens = emitNumTokens(capacity);
    Value routedSlots = arith::MulIOp::create(b, numTokens, lb.index(numSlots));
    auto outputType = cast<RankedTensorType>(op.getOutput().getType());
    SmallVector<Value> dynamicSizes;
    if (outputType.isDynamicDim(0))
      dynamicSizes.push_back(slotOutput ? numTokens : capacity);
    Value output = lb.alloc(outputType, dynamicSizes);
    lb.fill(output, arith::ConstantOp::create(
                        b, b.getZeroAttr(outputType.getElementType())));

    Value zero = lb.index(0);
    Value rows =
        arith::MinUIOp::create(b, lb.toIndex(lb.load(numPadded, {})), capacity);
    lb.loop(zero, rows, [&](Value r) {
      Value slot = lb.toIndex(lb.load(sortedIds, r));
      Value block = arith::DivUIOp::create(b, r, lb.index(op.getBlockM()));
      Value expert = lb.toIndex(lb.load(expertIds, block));
      Value valid =
          arith::AndIOp::create(b, lb.inRange(slot, zero, routedSlots),
                                lb.inRange(expert, zero, lb.index(numExperts)));
      lb.ifThen(valid, [&] { emitRow(r, slot, expert, output); });
    });
    return lb.toTensor(outputType, output);
  }

private:
  Value optionalBuffer(Value tensor) {
    return tensor ? lb.toBuffer(tensor) : Value();
  }

  /// T, as T*S is the padding sentinel: from the token-order input, the
  /// routed weights, or else the capacity C = T*S + E*(block_m - 1).
  Value emitNumTokens(Value capacity) {
    if (op.getInputOrder() == RowOrder::token)
      return lb.dim(input, 0);
    if (routedWeights)
      return lb.dim(routedWeights, 0);
    int64_t padding = op.getNumStoredExperts() * (op.getBlockM() - 1);
    return arith::DivUIOp::create(
        b, arith::SubIOp::create(b, capacity, lb.index(padding)),
        lb.index(op.getNumSlots()));
  }

  /// Sorted row `r` holding `slot`, routed to `expert`: each output column
  /// through the epilogue (bias, gated activation, routed weight) to
  /// `output`.
  void emitRow(Value r, Value slot, Value expert, Value output) {
    int64_t numSlots = op.getNumSlots(), columns = op.getOutputColumns();
    Value token = arith::DivUIOp::create(b, slot, lb.index(numSlots));
    Value slotInToken = arith::RemUIOp::create(b, slot, lb.index(numSlots));
    Value source = op.getInputOrder() == RowOrder::token ? token : r;
    Value routedWeight =
        routedWeights ? lb.load(routedWeights, {token, slotInToken}) : Value();
    lb.loop(columns, [&](Value j) {
      Value value = emitBiasedDot(source, expert, j);
      if (op.isGated()) {
        Value up = emitBiasedDot(
            source, expert, arith::AddIOp::create(b, j, lb.index(columns)));
        value =
            emitGatedPair(b, b.getLoc(), op.getActivation(), op.getSwigluAttr(),
                          value, up, arith::FastMathFlags::none);
      }
      if (routedWeight)
        value = arith::MulFOp::create(b, value, routedWeight);
      if (op.getOutputOrder() == RowOrder::slot)
        lb.storeF32(value, output, {token, slotInToken, j});
      else
        lb.storeF32(value, output, {r, j});
    });
  }

  /// h[n] plus the bias of `expert` and n when the op has one.
  Value emitBiasedDot(Value source, Value expert, Value n) {
    Value value = emitDot(source, expert, n);
    if (!bias)
      return value;
    return arith::AddFOp::create(b, value, lb.loadF32(bias, {expert, n}));
  }

  /// h[n] of input row `source` and `expert` before the epilogue: the fp32
  /// dot product in K order (over decoded MXFP4 weights), or for fp8 the
  /// scaled sum the op defines.
  Value emitDot(Value source, Value expert, Value n) {
    Value zero = lb.index(0), k = lb.index(op.getReductionSize());
    if (!quantization || quantization.isWeightOnly())
      return emitDotRange(source, expert, n, zero, k);
    if (quantization.getWeights() != WeightScaling::block)
      return arith::MulFOp::create(b, emitDotRange(source, expert, n, zero, k),
                                   emitScale(source, expert, n, zero));
    // Block: each K block's partial sum times its scales, added in K order
    // (a multiply then an add, as the op defines it, not an fma).
    int64_t blockSize = quantization.getBlockSize();
    return lb.loop(
        zero, k, {lb.f32(0.0)},
        [&](Value begin, ValueRange carried) -> SmallVector<Value> {
          Value end = arith::MinUIOp::create(
              b, arith::AddIOp::create(b, begin, lb.index(blockSize)), k);
          Value kBlock = arith::DivUIOp::create(b, begin, lb.index(blockSize));
          Value partial = emitDotRange(source, expert, n, begin, end);
          Value scaled = arith::MulFOp::create(
              b, partial, emitScale(source, expert, n, kBlock));
          return {arith::AddFOp::create(b, carried[0], scaled)};
        },
        blockSize)[0];
  }

  /// The fp32 sum over k in [begin, end), in order, of
  /// input[source, k] * weights[expert, n, k].
  Value emitDotRange(Value source, Value expert, Value n, Value begin,
                     Value end) {
    return lb.loop(begin, end, {lb.f32(0.0)},
                   [&](Value k, ValueRange carried) -> SmallVector<Value> {
                     Value product = arith::MulFOp::create(
                         b, lb.loadF32(input, {source, k}),
                         loadWeight(expert, n, k));
                     return {arith::AddFOp::create(b, carried[0], product)};
                   })[0];
  }

  /// weights[expert, n, k] as f32: for MXFP4, nibble k % 2 of byte k / 2
  /// decoded times 2^(scale - 127) of its block (exact, but beyond f32's
  /// range).
  Value loadWeight(Value expert, Value n, Value k) {
    if (!quantization || quantization.getWeights() != WeightScaling::mxfp4)
      return lb.loadF32(weights, {expert, n, k});
    Value byte = lb.load(
        weights, {expert, n, arith::DivUIOp::create(b, k, lb.index(2))});
    Value shift = lb.toI32(arith::MulIOp::create(
        b, arith::RemUIOp::create(b, k, lb.index(2)), lb.index(4)));
    Value nibble = arith::AndIOp::create(
        b,
        arith::ShRUIOp::create(
            b, arith::ExtUIOp::create(b, b.getI32Type(), byte), shift),
        lb.i32(0xF));
    Value scale = lb.load(
        weightScales,
        {expert, n,
         arith::DivUIOp::create(b, k, lb.index(quantization.getBlockSize()))});
    return arith::MulFOp::create(
        b, emitF32FromE2M1(b, b.getLoc(), nibble),
        emitF32FromE8M0(b, b.getLoc(),
                        arith::BitcastOp::create(b, b.getI8Type(), scale)));
  }

  /// input_scales[source, kBlock] times the scale of weights[expert, n] in
  /// K block `kBlock` (0 unless block-scaled).
  Value emitScale(Value source, Value expert, Value n, Value kBlock) {
    SmallVector<Value> indices = {expert};
    if (quantization.getWeights() == WeightScaling::channel)
      indices.push_back(n);
    if (quantization.getWeights() == WeightScaling::block)
      indices.append(
          {arith::DivUIOp::create(b, n, lb.index(quantization.getBlockSize())),
           kBlock});
    return arith::MulFOp::create(b, lb.load(inputScales, {source, kBlock}),
                                 lb.load(weightScales, indices));
  }

  GroupedMatmulOp op;
  LoopBuilder &lb;
  ImplicitLocOpBuilder &b;
  QuantizationAttr quantization;
  Value input, weights, sortedIds, expertIds, numPadded, routedWeights, bias,
      inputScales, weightScales;
};

/// Pattern: moe.grouped_matmul => for each valid padded row, an fp32 dot
/// product per output column (fp8: scaled per K block, channel or tensor)
/// with the epilogue applied before the store.
struct GroupedMatmulToLoops : OpRewritePattern<GroupedMatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GroupedMatmulOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    rewriter.replaceOp(op, GroupedMatmulLoops(op, lb).emit());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// moe.quantize
//===----------------------------------------------------------------------===//

/// Pattern: moe.quantize(x, s, n) => for each row below n (all without n)
/// and group of columns: its scale (the given s[0], else from the group's
/// amax), and each x / scale encoded to e4m3.
struct QuantizeToLoops : OpRewritePattern<QuantizeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(QuantizeOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    Value input = lb.toBuffer(op.getInput());
    Value numRows = lb.dim(input, 0);
    auto outputType = cast<RankedTensorType>(op.getOutput().getType());
    auto scalesType = cast<RankedTensorType>(op.getScales().getType());
    SmallVector<Value> dynamicRows;
    if (outputType.isDynamicDim(0))
      dynamicRows.push_back(numRows);
    Value output = lb.alloc(outputType, dynamicRows);
    Value scales = lb.alloc(scalesType, dynamicRows);
    Value rows = numRows;
    if (op.getNumRows())
      rows = arith::MinUIOp::create(
          b, lb.toIndex(lb.load(lb.toBuffer(op.getNumRows()), {})), numRows);
    Value staticScale;
    if (op.getScale())
      staticScale = lb.load(lb.toBuffer(op.getScale()), {lb.index(0)});

    int64_t groupSize = op.getGroupSize();
    Value k = lb.index(outputType.getDimSize(1));
    lb.loop(lb.index(0), rows, [&](Value m) {
      lb.loop(
          lb.index(0), k,
          [&](Value begin) {
            Value end = arith::MinUIOp::create(
                b, arith::AddIOp::create(b, begin, lb.index(groupSize)), k);
            Value group = arith::DivUIOp::create(b, begin, lb.index(groupSize));
            Value scale = staticScale
                              ? staticScale
                              : emitGroupScale(lb, input, m, begin, end);
            lb.store(scale, scales, {m, group});
            lb.loop(begin, end, [&](Value kk) {
              Value x = lb.loadF32(input, {m, kk});
              lb.storeF32(arith::DivFOp::create(b, x, scale), output, {m, kk});
            });
          },
          groupSize);
    });
    rewriter.replaceOp(
        op, {lb.toTensor(outputType, output), lb.toTensor(scalesType, scales)});
    return success();
  }

  /// max(amax, 1e-10) / 448 of columns [begin, end) of row `m`, amax the
  /// largest |x| (NaN when any x is NaN: maximumf propagates it).
  static Value emitGroupScale(LoopBuilder &lb, Value input, Value m,
                              Value begin, Value end) {
    ImplicitLocOpBuilder &b = lb.b;
    Value amax =
        lb.loop(begin, end, {lb.f32(0.0)},
                [&](Value k, ValueRange carried) -> SmallVector<Value> {
                  Value x = lb.loadF32(input, {m, k});
                  return {arith::MaximumFOp::create(
                      b, carried[0], math::AbsFOp::create(b, x))};
                })[0];
    return emitQuantizationScale(b, b.getLoc(), amax);
  }
};

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

/// Pattern: moe.combine(rows, weights, ids) => out[t, h] = sum_s w *
/// rows[t, s, h] over the slots whose ids are in range (all without ids).
struct CombineToLoops : OpRewritePattern<CombineOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(CombineOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    auto rowsType = cast<RankedTensorType>(op.getRows().getType());
    int64_t numSlots = rowsType.getDimSize(1);
    int64_t hiddenSize = rowsType.getDimSize(2);

    Value rows = lb.toBuffer(op.getRows());
    Value weights = op.getWeights() ? lb.toBuffer(op.getWeights()) : Value();
    Value ids = op.getIds() ? lb.toBuffer(op.getIds()) : Value();
    Value numTokens = lb.dim(rows, 0);
    auto outputType = cast<RankedTensorType>(op.getOutput().getType());
    Value output = lb.alloc(outputType, outputType.isDynamicDim(0)
                                            ? SmallVector<Value>{numTokens}
                                            : SmallVector<Value>{});
    Value zeroIndex = lb.index(0);
    lb.loop(zeroIndex, numTokens, [&](Value t) {
      lb.loop(hiddenSize, [&](Value h) {
        Value sum = lb.loop(
            zeroIndex, lb.index(numSlots), {lb.f32(0.0)},
            [&](Value s, ValueRange carried) -> SmallVector<Value> {
              Value row = lb.loadF32(rows, {t, s, h});
              if (weights)
                row = arith::MulFOp::create(b, row, lb.load(weights, {t, s}));
              Value sum = arith::AddFOp::create(b, carried[0], row);
              if (!ids)
                return {sum};
              // Not `row * valid`: an unrouted row may hold NaN.
              Value routed =
                  lb.inRange(lb.load(ids, {t, s}), lb.i32(0),
                             lb.i32(static_cast<int64_t>(*op.getNumExperts())));
              return {lb.select(routed, sum, carried[0])};
            })[0];
        lb.storeF32(sum, output, {t, h});
      });
    });
    rewriter.replaceOp(op, lb.toTensor(outputType, output));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Expert-parallel exchange
//===----------------------------------------------------------------------===//

/// A fresh buffer holding the contents of `tensor`: the buffers an exchange
/// op updates keep what other ranks wrote.
Value copyOf(LoopBuilder &lb, Value tensor) {
  Value copy = lb.alloc(tensor.getType());
  memref::CopyOp::create(lb.b, lb.toBuffer(tensor), copy);
  return copy;
}

/// The rows written to region (e, src) of a receive buffer whose `counts`
/// buffer is [L, W]: counts[e, src] clamped to [0, capacity] (rows past a
/// region's capacity were never written), as an index.
Value currentRows(LoopBuilder &lb, Value counts, Value e, Value src,
                  int64_t capacity) {
  ImplicitLocOpBuilder &b = lb.b;
  Value count = lb.toIndex(lb.load(counts, {e, src}));
  Value nonNegative = arith::MaxSIOp::create(b, count, lb.index(0));
  return arith::MinSIOp::create(b, nonNegative, lb.index(capacity));
}

/// Runs `body(e, src, rows)` for each region of a receive buffer whose
/// `counts` buffer is [L, W]: local expert e, source rank src, and the rows
/// written there (currentRows).
void forEachRegion(LoopBuilder &lb, Value counts, int64_t capacity,
                   function_ref<void(Value, Value, Value)> body) {
  auto countsType = cast<MemRefType>(counts.getType());
  lb.loop(countsType.getDimSize(0), [&](Value e) {
    lb.loop(countsType.getDimSize(1), [&](Value src) {
      body(e, src, currentRows(lb, counts, e, src, capacity));
    });
  });
}

/// Row (e * W + src) * C + i of a receive buffer.
Value receiveRow(LoopBuilder &lb, Value expert, Value source, Value i,
                 int64_t world, int64_t capacity) {
  ImplicitLocOpBuilder &b = lb.b;
  Value region = arith::AddIOp::create(
      b, arith::MulIOp::create(b, expert, lb.index(world)), source);
  return arith::AddIOp::create(
      b, arith::MulIOp::create(b, region, lb.index(capacity)), i);
}

/// Pattern: moe.ep_dispatch(x, ids, w) into(buffers) => copies of the
/// buffers with this rank's counts reset, then per slot in order its row,
/// weight and slot id appended to its expert's region from this rank.
struct EpDispatchToLoops : OpRewritePattern<EpDispatchOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(EpDispatchOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    ExpertParallelAttr parallel = op.getExpertParallel();
    int64_t world = parallel.getWorld(), numExperts = op.getNumExperts();
    auto countsType = cast<RankedTensorType>(op.getRecvCounts().getType());
    auto rowsType = cast<RankedTensorType>(op.getRecvRows().getType());
    auto idsType = cast<RankedTensorType>(op.getIds().getType());
    int64_t local = countsType.getDimSize(1);
    int64_t routedLocal = parallel.getLocalExperts(numExperts);
    int64_t capacity = rowsType.getDimSize(1) / (local * world);
    int64_t numSlots = idsType.getDimSize(1);
    int64_t hiddenSize = rowsType.getDimSize(2);

    Value hidden = lb.toBuffer(op.getHiddenStates());
    Value ids = lb.toBuffer(op.getIds());
    Value weights = lb.toBuffer(op.getWeights());
    Value rows = copyOf(lb, op.getRecvRows());
    Value routedWeights = copyOf(lb, op.getRecvWeights());
    Value slots = copyOf(lb, op.getRecvSlots());
    Value counts = copyOf(lb, op.getRecvCounts());
    Value rank = lb.index(parallel.getRank());
    lb.loop(world, [&](Value d) {
      lb.loop(local,
              [&](Value e) { lb.store(lb.i32(0), counts, {d, e, rank}); });
    });

    Value firstShared = lb.i32(numExperts);
    lb.loop(idsType.getDimSize(0), [&](Value t) {
      lb.loop(numSlots, [&](Value s) {
        Value id = lb.load(ids, {t, s});
        Value stored = lb.i32(numExperts + local - routedLocal);
        lb.ifThen(lb.inRange(id, lb.i32(0), stored), [&] {
          // A routed expert's rank and index there; a shared one stays.
          Value routed = lb.cmpi(arith::CmpIPredicate::slt, id, firstShared);
          Value perRank = lb.i32(routedLocal);
          Value d = lb.select(routed, arith::DivUIOp::create(b, id, perRank),
                              lb.toI32(rank));
          Value e = lb.select(
              routed, arith::RemUIOp::create(b, id, perRank),
              arith::AddIOp::create(
                  b, arith::SubIOp::create(b, id, firstShared), perRank));
          d = lb.toIndex(d);
          e = lb.toIndex(e);
          Value count = lb.load(counts, {d, e, rank});
          lb.store(arith::AddIOp::create(b, count, lb.i32(1)), counts,
                   {d, e, rank});
          Value i = lb.toIndex(count);
          lb.ifThen(
              lb.cmpi(arith::CmpIPredicate::slt, i, lb.index(capacity)), [&] {
                Value row = receiveRow(lb, e, rank, i, world, capacity);
                lb.loop(hiddenSize, [&](Value h) {
                  lb.store(lb.load(hidden, {t, h}), rows, {d, row, h});
                });
                lb.store(lb.load(weights, {t, s}), routedWeights, {d, row});
                Value slot = arith::AddIOp::create(
                    b, arith::MulIOp::create(b, t, lb.index(numSlots)), s);
                lb.store(lb.toI32(slot), slots, {d, row});
              });
        });
      });
    });
    rewriter.replaceOp(
        op, {lb.toTensor(op.getRows().getType(), rows),
             lb.toTensor(op.getRoutedWeights().getType(), routedWeights),
             lb.toTensor(op.getSlots().getType(), slots),
             lb.toTensor(op.getCounts().getType(), counts)});
    return success();
  }
};

/// Pattern: moe.ep_route(counts) => per local expert its current receive
/// rows, region after region, then the sentinel up to a whole block, and
/// the expert of each of its blocks; the sentinel and -1 past them.
struct EpRouteToLoops : OpRewritePattern<EpRouteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(EpRouteOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    auto countsType = cast<RankedTensorType>(op.getCounts().getType());
    int64_t local = countsType.getDimSize(0), world = countsType.getDimSize(1);
    int64_t blockM = op.getBlockM();
    int64_t rows =
        cast<RankedTensorType>(op.getSortedIds().getType()).getDimSize(0) -
        local * (blockM - 1);
    int64_t capacity = rows / (local * world);
    Value counts = lb.toBuffer(op.getCounts());
    Value sortedIds = lb.alloc(op.getSortedIds().getType());
    Value expertIds = lb.alloc(op.getExpertIds().getType());
    Value numPadded = lb.alloc(op.getNumPadded().getType());
    lb.fill(sortedIds, lb.i32(rows));
    lb.fill(expertIds, lb.i32(-1));
    Value total = lb.loop(
        lb.index(0), lb.index(local), {lb.index(0)},
        [&](Value e, ValueRange carried) -> SmallVector<Value> {
          Value start = carried[0];
          Value end = lb.loop(
              lb.index(0), lb.index(world), {start},
              [&](Value src, ValueRange position) -> SmallVector<Value> {
                Value current = currentRows(lb, counts, e, src, capacity);
                lb.loop(lb.index(0), current, [&](Value i) {
                  Value row = receiveRow(lb, e, src, i, world, capacity);
                  Value at = arith::AddIOp::create(b, position[0], i);
                  lb.store(lb.toI32(row), sortedIds, at);
                });
                return {arith::AddIOp::create(b, position[0], current)};
              })[0];
          Value blocks = arith::CeilDivUIOp::create(
              b, arith::SubIOp::create(b, end, start), lb.index(blockM));
          Value firstBlock = arith::DivUIOp::create(b, start, lb.index(blockM));
          lb.loop(
              firstBlock, arith::AddIOp::create(b, firstBlock, blocks),
              [&](Value block) { lb.store(lb.toI32(e), expertIds, block); });
          return {arith::AddIOp::create(
              b, start, arith::MulIOp::create(b, blocks, lb.index(blockM)))};
        })[0];
    lb.store(lb.toI32(total), numPadded, {});
    rewriter.replaceOp(op,
                       {lb.toTensor(op.getSortedIds().getType(), sortedIds),
                        lb.toTensor(op.getExpertIds().getType(), expertIds),
                        lb.toTensor(op.getNumPadded().getType(), numPadded)});
    return success();
  }
};

/// Pattern: moe.ep_combine(rows, slots, counts) into(returned) => a copy of
/// returned with each current row stored at its source's slot.
struct EpCombineToLoops : OpRewritePattern<EpCombineOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(EpCombineOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    auto returnedType = cast<RankedTensorType>(op.getReturned().getType());
    int64_t world =
        cast<RankedTensorType>(op.getCounts().getType()).getDimSize(1);
    int64_t capacity = returnedType.getDimSize(1);
    int64_t numSlots = returnedType.getDimSize(2);
    int64_t hiddenSize = returnedType.getDimSize(3);
    Value rows = lb.toBuffer(op.getRows());
    Value slots = lb.toBuffer(op.getSlots());
    Value counts = lb.toBuffer(op.getCounts());
    Value returned = copyOf(lb, op.getReturned());
    forEachRegion(lb, counts, capacity, [&](Value e, Value src, Value current) {
      lb.loop(lb.index(0), current, [&](Value i) {
        Value row = receiveRow(lb, e, src, i, world, capacity);
        Value slot = lb.toIndex(lb.load(slots, row));
        lb.ifThen(
            lb.inRange(slot, lb.index(0), lb.index(capacity * numSlots)), [&] {
              Value t = arith::DivUIOp::create(b, slot, lb.index(numSlots));
              Value s = arith::RemUIOp::create(b, slot, lb.index(numSlots));
              lb.loop(hiddenSize, [&](Value h) {
                lb.store(lb.load(rows, {row, h}), returned, {src, t, s, h});
              });
            });
      });
    });
    rewriter.replaceOp(op, lb.toTensor(returnedType, returned));
    return success();
  }
};

/// Pattern: moe.ep_signal into(flags) => a copy of flags with flags[d, R]
/// incremented for every rank d.
struct EpSignalToLoops : OpRewritePattern<EpSignalOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(EpSignalOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    ExpertParallelAttr parallel = op.getExpertParallel();
    Value flags = copyOf(lb, op.getFlags());
    Value rank = lb.index(parallel.getRank());
    lb.loop(parallel.getWorld(), [&](Value d) {
      Value count = lb.load(flags, {d, rank});
      lb.store(arith::AddIOp::create(b, count, lb.i32(1)), flags, {d, rank});
    });
    rewriter.replaceOp(op, lb.toTensor(op.getOutput().getType(), flags));
    return success();
  }
};

/// Pattern: moe.ep_wait flags into(status) guards(buffers) => a copy of
/// status holding [phase, s + 1] for the first source s behind this rank,
/// unless it held a failure already; the guarded buffers as they are. The
/// phases of the ranks run in turn here: a source behind never catches up.
struct EpWaitToLoops : OpRewritePattern<EpWaitOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(EpWaitOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    LoopBuilder lb{b};
    ExpertParallelAttr parallel = op.getExpertParallel();
    Value flags = lb.toBuffer(op.getFlags());
    Value status = copyOf(lb, op.getStatus());
    Value rank = lb.index(parallel.getRank());
    Value epoch = lb.load(flags, {rank, rank});
    lb.loop(parallel.getWorld(), [&](Value s) {
      // Counters wrap: a source is behind when its difference is negative.
      Value ahead = arith::SubIOp::create(b, lb.load(flags, {rank, s}), epoch);
      Value behind = lb.cmpi(arith::CmpIPredicate::slt, ahead, lb.i32(0));
      Value first = lb.cmpi(arith::CmpIPredicate::eq,
                            lb.load(status, lb.index(0)), lb.i32(0));
      lb.ifThen(arith::AndIOp::create(b, behind, first), [&] {
        lb.store(lb.i32(op.getPhase()), status, lb.index(0));
        lb.store(lb.toI32(arith::AddIOp::create(b, s, lb.index(1))), status,
                 lb.index(1));
      });
    });
    SmallVector<Value> results = {
        lb.toTensor(op.getUpdatedStatus().getType(), status)};
    llvm::append_range(results, op.getGuarded());
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct ConvertMoeToLoopsPass
    : moe::impl::ConvertMoeToLoopsBase<ConvertMoeToLoopsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMoeToLoopsPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
    // TMA descriptors mean nothing to loops: they go with the GEMMs that
    // loaded through them.
    getOperation()->walk([](TensorMapOp map) {
      if (map->use_empty())
        map->erase();
    });
    WalkResult remaining = getOperation()->walk([](Operation *op) {
      if (isa<FusedMoeOp, FusedExpertsOp>(op)) {
        op->emitError() << "convert-moe-to-loops: run moe-decompose first";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (remaining.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

void mlir::moe::populateMoeToLoopsPatterns(RewritePatternSet &patterns) {
  patterns.add<GateToLoops, RouteToLoops, GroupedMatmulToLoops, QuantizeToLoops,
               CombineToLoops, EpDispatchToLoops, EpRouteToLoops,
               EpCombineToLoops, EpSignalToLoops, EpWaitToLoops>(
      patterns.getContext());
}
