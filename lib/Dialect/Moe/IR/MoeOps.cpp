//===- MoeOps.cpp - moe operations ----------------------------------------===//

#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Target/DefaultTarget.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::moe;

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

/// Formats a shape as `[4, ?, 8]`.
static std::string formatShape(ArrayRef<int64_t> dims) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << '[';
  llvm::interleaveComma(dims, os, [&](int64_t dim) {
    if (ShapedType::isDynamic(dim))
      os << '?';
    else
      os << dim;
  });
  os << ']';
  return text;
}

/// Checks that operand or result `name` has the shape `expected`, where a
/// dynamic size on either side matches anything (as in tensor.cast).
/// `meaning` names the dimensions, e.g. "[T, E]".
static LogicalResult verifyShape(Operation *op, StringRef name, Value value,
                                 ArrayRef<int64_t> expected,
                                 StringRef meaning) {
  auto type = cast<RankedTensorType>(value.getType());
  auto report = [&]() {
    return op->emitOpError()
           << "expects '" << name << "' of shape " << meaning << " = "
           << formatShape(expected) << ", got " << type;
  };
  if (type.getRank() != static_cast<int64_t>(expected.size()))
    return report();
  for (auto [actual, wanted] : llvm::zip(type.getShape(), expected))
    if (!ShapedType::isDynamic(actual) && !ShapedType::isDynamic(wanted) &&
        actual != wanted)
      return report();
  return success();
}

/// Checks that `name` has rank `rank`.
static LogicalResult verifyRank(Operation *op, StringRef name, Value value,
                                int64_t rank, StringRef meaning) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != rank)
    return op->emitOpError() << "expects '" << name << "' of rank " << rank
                             << " " << meaning << ", got " << type;
  return success();
}

/// Checks that dimensions `dims` of `name`, described by `meaning`, are
/// static.
static LogicalResult verifyStaticDims(Operation *op, StringRef name,
                                      Value value, ArrayRef<unsigned> dims,
                                      StringRef meaning) {
  auto type = cast<RankedTensorType>(value.getType());
  for (unsigned dim : dims)
    if (type.isDynamicDim(dim))
      return op->emitOpError() << "expects '" << name << "' " << meaning
                               << " to be static, got " << type;
  return success();
}

/// Checks that `name` has the element type `expected`.
static LogicalResult verifyElementType(Operation *op, StringRef name,
                                       Value value, Type expected,
                                       StringRef source) {
  Type actual = getElementTypeOrSelf(value.getType());
  if (actual != expected)
    return op->emitOpError()
           << "expects '" << name << "' to have the element "
           << "type of " << source << " (" << expected << "), got " << actual;
  return success();
}

/// Checks that a weight-only quantized GEMM's `input` rows are floats (f32,
/// bf16 or f16), not quantized codes.
static LogicalResult verifyFloatInput(Operation *op, Value input) {
  Type actual = getElementTypeOrSelf(input.getType());
  if (!isa<Float32Type, BFloat16Type, Float16Type>(actual))
    return op->emitOpError() << "expects float 'input' rows (f32, bf16 or "
                                "f16) with weight-only quantization, got "
                             << actual;
  return success();
}

/// Merges token counts known from several places; returns failure when two
/// static counts disagree.
static FailureOr<int64_t> mergeTokenCounts(ArrayRef<int64_t> counts) {
  int64_t merged = ShapedType::kDynamic;
  for (int64_t count : counts) {
    if (ShapedType::isDynamic(count))
      continue;
    if (!ShapedType::isDynamic(merged) && merged != count)
      return failure();
    merged = count;
  }
  return merged;
}

static int64_t dimOf(Value value, unsigned dim) {
  return cast<RankedTensorType>(value.getType()).getDimSize(dim);
}

/// Returns the N of a GEMM output after `activation` halves N' = N / 2.
static FailureOr<int64_t> outputColumns(Operation *op, Activation activation,
                                        int64_t n) {
  if (activation == Activation::none)
    return n;
  if (n % 2 != 0)
    return op->emitOpError()
           << "activation " << stringifyActivation(activation)
           << " multiplies the two halves of N, which needs an even N, got "
           << n;
  return n / 2;
}

/// The element types of weights and of their scales that `quantization`
/// stores (f8E4M3FN with f32 scales, packed MXFP4 i8 with f8E8M0FNU ones).
static std::pair<Type, Type> quantizedTypes(MLIRContext *context,
                                            QuantizationAttr quantization) {
  if (quantization.getWeights() == WeightScaling::mxfp4)
    return {IntegerType::get(context, 8), Float8E8M0FNUType::get(context)};
  return {Float8E4M3FNType::get(context), Float32Type::get(context)};
}

/// Checks that quantized `weights` [E, N, K / packing] come with `scales` of
/// the types and shape `quantization` gives for the logical K `k`, and that
/// other weights come without scales.
static LogicalResult verifyWeightScales(Operation *op,
                                        QuantizationAttr quantization,
                                        StringRef weightsName, Value weights,
                                        StringRef scalesName, Value scales,
                                        int64_t k) {
  Type elementType = getElementTypeOrSelf(weights.getType());
  if (!quantization) {
    if (isa<Float8E4M3FNType>(elementType) || elementType.isInteger(8))
      return op->emitOpError() << "expects a quantization for its "
                               << elementType << " '" << weightsName << "'";
    if (scales)
      return op->emitOpError()
             << "expects '" << scalesName << "' only with a quantization";
    return success();
  }
  auto [weightType, scaleType] = quantizedTypes(op->getContext(), quantization);
  std::string scheme = stringifyWeightScaling(quantization.getWeights()).str();
  if (elementType != weightType)
    return op->emitOpError()
           << "expects " << weightType << " '" << weightsName
           << "' with weights = " << scheme << ", got " << elementType;
  if (!scales)
    return op->emitOpError() << "expects '" << scalesName << "' with "
                             << weightType << " '" << weightsName << "'";
  Type scalesElement = getElementTypeOrSelf(scales.getType());
  if (scalesElement != scaleType)
    return op->emitOpError()
           << "expects " << scaleType << " '" << scalesName
           << "' with weights = " << scheme << ", got " << scalesElement;
  int64_t block = quantization.getBlockSize();
  if (quantization.getWeights() == WeightScaling::mxfp4 && k % block != 0)
    return op->emitOpError()
           << "expects the K of '" << weightsName << "' (" << k
           << ") to be a multiple of the mxfp4 block (" << block << ")";
  auto type = cast<RankedTensorType>(weights.getType());
  SmallVector<int64_t> shape = quantization.getWeightScalesShape(
      type.getDimSize(0), type.getDimSize(1), k);
  return verifyShape(op, scalesName, scales, shape,
                     scheme + " scales of '" + weightsName.str() + "'");
}

/// Checks that `name` holds one per-tensor scale: a static [1].
static LogicalResult verifyPerTensorScale(Operation *op, StringRef name,
                                          Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getShape() != ArrayRef<int64_t>{1})
    return op->emitOpError() << "expects '" << name
                             << "' to hold one scale (shape [1]), got " << type;
  return success();
}

/// The weights of a layer's expert MLP, their biases, their fp8 scales and
/// the static scales of the two GEMMs' inputs.
struct ExpertWeights {
  Value w13, w2, w13Bias, w2Bias, w13Scales, w2Scales, w13InputScale,
      w2InputScale;
  QuantizationAttr quantization;
};

/// Checks that the expert biases come both or neither, as w13_bias [stored,
/// 2I] and w2_bias [stored, H].
static LogicalResult verifyExpertBiases(Operation *op,
                                        const ExpertWeights &experts,
                                        StringRef storedName) {
  if (static_cast<bool>(experts.w13Bias) != static_cast<bool>(experts.w2Bias))
    return op->emitOpError() << "expects 'w13_bias' and 'w2_bias' together";
  if (!experts.w13Bias)
    return success();
  // H from w2's rows: w13's last dimension is H/2 for packed weights.
  auto w13 = cast<RankedTensorType>(experts.w13.getType());
  auto w2 = cast<RankedTensorType>(experts.w2.getType());
  if (failed(verifyShape(op, "w13_bias", experts.w13Bias,
                         {w13.getDimSize(0), w13.getDimSize(1)},
                         ("[" + storedName + ", 2I]").str())))
    return failure();
  return verifyShape(op, "w2_bias", experts.w2Bias,
                     {w2.getDimSize(0), w2.getDimSize(1)},
                     ("[" + storedName + ", H]").str());
}

/// Checks that the inputs' static scales come exactly with static_tensor
/// activations, one scale each.
static LogicalResult verifyInputScales(Operation *op,
                                       const ExpertWeights &experts) {
  bool isStatic =
      experts.quantization && experts.quantization.hasStaticActivations();
  if (static_cast<bool>(experts.w13InputScale) != isStatic)
    return op->emitOpError()
           << "expects 'input_scales' (the w13 and w2 inputs' given scales) "
           << (isStatic ? "with" : "only with")
           << " activations = static_tensor";
  if (!isStatic)
    return success();
  if (failed(
          verifyPerTensorScale(op, "w13_input_scale", experts.w13InputScale)))
    return failure();
  return verifyPerTensorScale(op, "w2_input_scale", experts.w2InputScale);
}

/// Checks the expert MLP of a layer: `w13` [stored, 2I, H] holding gate and
/// up rows, `w2` [stored, H, I], both in the element type of `hidden` [T, H]
/// (or f8E4M3FN with their scales), and `output` [T, H] of the type of
/// `hidden`. `storedName` names `stored` in messages ("E+X" or "E").
static LogicalResult verifyExpertWeights(Operation *op, Value hidden,
                                         const ExpertWeights &experts,
                                         Value output, int64_t stored,
                                         StringRef storedName) {
  Value w13 = experts.w13, w2 = experts.w2;
  std::string w13Meaning = ("[" + storedName + ", 2I, H]").str();
  std::string w2Meaning = ("[" + storedName + ", H, I]").str();
  if (failed(verifyRank(op, "w13", w13, 3, w13Meaning)) ||
      failed(verifyStaticDims(op, "w13", w13, {0, 1, 2}, "dimensions")))
    return failure();
  int64_t twiceI = dimOf(w13, 1);
  if (twiceI % 2 != 0)
    return op->emitOpError() << "expects 'w13' to hold gate and up rows (an "
                                "even 2I), got "
                             << w13.getType();
  int64_t numTokens = dimOf(hidden, 0), hiddenSize = dimOf(hidden, 1);
  Type elementType = getElementTypeOrSelf(hidden.getType());
  // Packed MXFP4 weights hold two values of K per element.
  int64_t packing =
      experts.quantization ? experts.quantization.getWeightPacking() : 1;
  if (packing > 1)
    for (auto [name, size] :
         {std::pair<StringRef, int64_t>{"H", hiddenSize}, {"I", twiceI / 2}})
      if (size % packing != 0)
        return op->emitOpError() << "expects an even " << name
                                 << " for packed mxfp4 weights, got " << size;
  if (failed(verifyShape(op, "w13", w13, {stored, twiceI, hiddenSize / packing},
                         packing > 1 ? "[" + storedName.str() + ", 2I, H/2]"
                                     : w13Meaning)) ||
      failed(verifyShape(
          op, "w2", w2, {stored, hiddenSize, twiceI / 2 / packing},
          packing > 1 ? "[" + storedName.str() + ", H, I/2]" : w2Meaning)) ||
      failed(verifyWeightScales(op, experts.quantization, "w13", w13,
                                "w13_scales", experts.w13Scales, hiddenSize)) ||
      failed(verifyWeightScales(op, experts.quantization, "w2", w2, "w2_scales",
                                experts.w2Scales, twiceI / 2)) ||
      failed(verifyInputScales(op, experts)) ||
      failed(verifyExpertBiases(op, experts, storedName)) ||
      failed(
          verifyShape(op, "output", output, {numTokens, hiddenSize}, "[T, H]")))
    return failure();
  if (!experts.quantization &&
      (failed(
           verifyElementType(op, "w13", w13, elementType, "hidden_states")) ||
       failed(verifyElementType(op, "w2", w2, elementType, "hidden_states"))))
    return failure();
  return verifyElementType(op, "output", output, elementType, "hidden_states");
}

/// Checks that `numTokens` tokens (a dynamic T: one at least) of `numSlots`
/// slots route into at most kMaxSize rows over `numExperts` experts padded
/// to `blockM`-row blocks.
static LogicalResult verifyTokenRouting(Operation *op, int64_t numTokens,
                                        int64_t numSlots, int64_t numExperts,
                                        int64_t blockM) {
  bool dynamicTokens = ShapedType::isDynamic(numTokens);
  std::string cause = dynamicTokens ? "even at one token"
                                    : "at T = " + std::to_string(numTokens);
  return verifyRoutingCapacity([&] { return op->emitOpError(); }, cause,
                               dynamicTokens ? 1 : numTokens, numSlots,
                               numExperts, blockM);
}

/// Checks that `swiglu` (the clamped SwiGLU's parameters) comes exactly with
/// that activation.
static LogicalResult verifyActivationParameters(Operation *op,
                                                Activation activation,
                                                SwigluAttr swiglu) {
  bool clamped = activation == Activation::clamped_swiglu;
  if (static_cast<bool>(swiglu) != clamped)
    return op->emitOpError()
           << "expects a 'swiglu' attribute (alpha and limit) "
           << (clamped ? "with" : "only with") << " activation clamped_swiglu";
  return success();
}

/// Checks that a layer's expert MLP has a gated activation, with its
/// parameters.
static LogicalResult verifyGatedActivation(Operation *op, Activation activation,
                                           SwigluAttr swiglu) {
  if (activation == Activation::none)
    return op->emitOpError()
           << "expects a gated activation (silu_and_mul, gelu_and_mul or "
              "clamped_swiglu) for the expert MLP";
  return verifyActivationParameters(op, activation, swiglu);
}

//===----------------------------------------------------------------------===//
// Expert-parallel layout
//===----------------------------------------------------------------------===//

/// Checks that `numExperts` routed experts split evenly over the ranks of
/// `parallel`.
static LogicalResult verifyEvenSplit(Operation *op, ExpertParallelAttr parallel,
                                     int64_t numExperts) {
  if (numExperts % parallel.getWorld() != 0)
    return op->emitOpError() << "expects the " << numExperts
                             << " routed experts to split evenly over world = "
                             << parallel.getWorld() << " ranks";
  return success();
}

/// Checks that `hidden` [T, H] has a static T, the capacity of the
/// exchange's receive regions.
static LogicalResult verifyStaticTokens(Operation *op, Value hidden) {
  return verifyStaticDims(op, "hidden_states", hidden, {0},
                          "token count T (each rank's bucket, which sizes "
                          "the exchange's buffers)");
}

/// Checks an expert-parallel layer over `hidden` [T, H]: a static T, E
/// divisible by the world, and a receive buffer of (E/W + X) * W * T rows
/// that i32 rows address.
static LogicalResult verifyExpertParallelLayer(Operation *op,
                                               ExpertParallelAttr parallel,
                                               Value hidden, int64_t numExperts,
                                               int64_t numShared) {
  if (failed(verifyStaticTokens(op, hidden)) ||
      failed(verifyEvenSplit(op, parallel, numExperts)))
    return failure();
  int64_t local = parallel.getLocalExperts(numExperts) + numShared;
  std::optional<int64_t> rows = llvm::checkedMul(local, parallel.getWorld());
  if (rows)
    rows = llvm::checkedMul(*rows, dimOf(hidden, 0));
  if (!rows || *rows > kMaxSize)
    return op->emitOpError()
           << "expects a receive buffer of (E/W+X)*W*T = " << local << "*"
           << parallel.getWorld() << "*" << dimOf(hidden, 0)
           << " rows, at most " << kMaxSize;
  return success();
}

/// The sizes of a rank's expert-major receive buffer: `local` experts (L),
/// `world` source ranks (W) and `capacity` rows per region (C).
struct ReceiveLayout {
  int64_t local, world, capacity;

  int64_t rows() const { return local * world * capacity; }

  /// The layout of the rank's counts `counts` [L, W] (`dim` L at
  /// `firstDim`) and its rows `rows`: L*W*C, whose C it finds, or with
  /// `blockM` > 1 the routing of L*W*C rows padded to `blockM`-row blocks,
  /// L*W*C + L*(block_m - 1).
  static FailureOr<ReceiveLayout> of(Operation *op, Value counts,
                                     unsigned firstDim, StringRef rowsName,
                                     int64_t rows, int64_t blockM = 1) {
    int64_t local = dimOf(counts, firstDim),
            world = dimOf(counts, firstDim + 1);
    int64_t regionRows = rows - local * (blockM - 1);
    if (blockM > 1 && (regionRows < 1 || regionRows % (local * world) != 0))
      return op->emitOpError()
             << "expects '" << rowsName << "' to hold L*W*C + L*(block_m-1) "
             << "rows (C >= 1) for L*W = " << local << "*" << world
             << " and L*(block_m-1) = " << local << "*" << blockM - 1
             << ", got " << rows;
    if (regionRows % (local * world) != 0)
      return op->emitOpError()
             << "expects '" << rowsName << "' to hold L*W*C rows, a multiple "
             << "of L*W = " << local << "*" << world << ", got " << rows;
    return ReceiveLayout{local, world, regionRows / (local * world)};
  }
};

//===----------------------------------------------------------------------===//
// FusedMoeOp
//===----------------------------------------------------------------------===//

LogicalResult FusedMoeOp::verify() {
  Operation *op = getOperation();
  Value hidden = getHiddenStates(), logits = getRouterLogits();
  if (failed(verifyRank(op, "hidden_states", hidden, 2, "[T, H]")) ||
      failed(verifyStaticDims(op, "hidden_states", hidden, {1},
                              "hidden size H")) ||
      failed(verifyRank(op, "router_logits", logits, 2, "[T, E]")) ||
      failed(
          verifyStaticDims(op, "router_logits", logits, {1}, "expert count E")))
    return failure();
  int64_t numTokens = dimOf(hidden, 0), numExperts = dimOf(logits, 1);
  if (failed(verifyShape(op, "router_logits", logits, {numTokens, numExperts},
                         "[T, E]")))
    return failure();

  RouterAttr router = getRouter();
  if (failed(
          router.verifyForExperts([&] { return emitOpError(); }, numExperts)))
    return failure();
  if (failed(verifyGatedActivation(op, getActivation(), getSwigluAttr())) ||
      failed(verifyTokenRouting(op, numTokens, router.getNumSlots(),
                                /*numExperts=*/0, /*blockM=*/1)))
    return failure();
  int64_t stored = numExperts + router.getNumSharedExperts();
  StringRef storedName = "E+X";
  if (ExpertParallelAttr parallel = getExpertParallelAttr()) {
    if (failed(verifyExpertParallelLayer(op, parallel, hidden, numExperts,
                                         router.getNumSharedExperts())))
      return failure();
    stored =
        parallel.getLocalExperts(numExperts) + router.getNumSharedExperts();
    storedName = "E/W+X";
  }
  if (failed(verifyExpertWeights(op, hidden,
                                 {getW13(), getW2(), getW13Bias(), getW2Bias(),
                                  getW13Scales(), getW2Scales(),
                                  getW13InputScale(), getW2InputScale(),
                                  getQuantizationAttr()},
                                 getOutput(), stored, storedName)))
    return failure();
  if (Value bias = getCorrectionBias())
    return verifyShape(op, "correction_bias", bias, {numExperts}, "[E]");
  return success();
}

//===----------------------------------------------------------------------===//
// FusedExpertsOp
//===----------------------------------------------------------------------===//

LogicalResult FusedExpertsOp::verify() {
  Operation *op = getOperation();
  Value hidden = getHiddenStates(), ids = getIds();
  if (failed(verifyRank(op, "hidden_states", hidden, 2, "[T, H]")) ||
      failed(verifyStaticDims(op, "hidden_states", hidden, {1},
                              "hidden size H")) ||
      failed(verifyRank(op, "ids", ids, 2, "[T, S]")) ||
      failed(verifyStaticDims(op, "ids", ids, {1}, "slot count S")))
    return failure();
  int64_t numTokens = dimOf(hidden, 0), numSlots = dimOf(ids, 1);
  if (failed(verifyShape(op, "ids", ids, {numTokens, numSlots}, "[T, S]")) ||
      failed(verifyTokenRouting(op, numTokens, numSlots, /*numExperts=*/0,
                                /*blockM=*/1)) ||
      failed(verifyShape(op, "weights", getWeights(), {numTokens, numSlots},
                         "[T, S]")) ||
      failed(verifyGatedActivation(op, getActivation(), getSwigluAttr())) ||
      failed(verifyRank(op, "w13", getW13(), 3, "[E, 2I, H]")))
    return failure();
  return verifyExpertWeights(op, hidden,
                             {getW13(), getW2(), getW13Bias(), getW2Bias(),
                              getW13Scales(), getW2Scales(), getW13InputScale(),
                              getW2InputScale(), getQuantizationAttr()},
                             getOutput(), dimOf(getW13(), 0), "E");
}

//===----------------------------------------------------------------------===//
// GateOp
//===----------------------------------------------------------------------===//

LogicalResult GateOp::verify() {
  Operation *op = getOperation();
  Value logits = getLogits();
  if (failed(verifyRank(op, "logits", logits, 2, "[T, E]")) ||
      failed(verifyStaticDims(op, "logits", logits, {1}, "expert count E")))
    return failure();
  int64_t numTokens = dimOf(logits, 0), numExperts = dimOf(logits, 1);
  RouterAttr router = getRouter();
  if (failed(
          router.verifyForExperts([&] { return emitOpError(); }, numExperts)))
    return failure();
  if (Value bias = getCorrectionBias())
    if (failed(verifyShape(op, "correction_bias", bias, {numExperts}, "[E]")))
      return failure();
  int64_t numSlots = router.getNumSlots();
  if (failed(verifyShape(op, "weights", getWeights(), {numTokens, numSlots},
                         "[T, top_k + num_shared_experts]")))
    return failure();
  return verifyShape(op, "ids", getIds(), {numTokens, numSlots},
                     "[T, top_k + num_shared_experts]");
}

//===----------------------------------------------------------------------===//
// RouteOp
//===----------------------------------------------------------------------===//

int64_t RouteOp::getCapacity(int64_t numSlots, int64_t numExperts,
                             int64_t blockM) {
  if (ShapedType::isDynamic(numSlots))
    return ShapedType::kDynamic;
  return numSlots + numExperts * (blockM - 1);
}

/// Returns the number of `blockM`-row blocks that cover `capacity` rows.
static int64_t getNumBlocks(int64_t capacity, int64_t blockM) {
  if (ShapedType::isDynamic(capacity))
    return ShapedType::kDynamic;
  return llvm::divideCeil(capacity, blockM);
}

/// Checks `sorted_ids` [C] and `expert_ids` [ceil(C / block_m)] for routing
/// `numTokens` x `numSlots` slots over `numExperts` experts.
static LogicalResult verifyRouting(Operation *op, Value sortedIds,
                                   Value expertIds, int64_t numTokens,
                                   int64_t numSlots, int64_t numExperts,
                                   int64_t blockM) {
  if (failed(verifyTokenRouting(op, numTokens, numSlots, numExperts, blockM)))
    return failure();
  bool dynamicTokens = ShapedType::isDynamic(numTokens);
  int64_t routedSlots =
      dynamicTokens ? ShapedType::kDynamic : numTokens * numSlots;
  int64_t capacity = RouteOp::getCapacity(routedSlots, numExperts, blockM);
  if (failed(verifyShape(op, "sorted_ids", sortedIds, {capacity},
                         "[T*S + E*(block_m-1)]")))
    return failure();
  // When T is unknown here, the capacity is still known from sorted_ids.
  capacity = dimOf(sortedIds, 0);
  return verifyShape(op, "expert_ids", expertIds,
                     {getNumBlocks(capacity, blockM)}, "[ceil(C / block_m)]");
}

LogicalResult RouteOp::verify() {
  Operation *op = getOperation();
  Value ids = getIds();
  if (failed(verifyRank(op, "ids", ids, 2, "[T, S]")) ||
      failed(verifyStaticDims(op, "ids", ids, {1}, "slot count S")))
    return failure();
  return verifyRouting(op, getSortedIds(), getExpertIds(), dimOf(ids, 0),
                       dimOf(ids, 1), getNumExperts(), getBlockM());
}

//===----------------------------------------------------------------------===//
// GroupedMatmulOp
//===----------------------------------------------------------------------===//

LogicalResult GroupedMatmulOp::verify() {
  Operation *op = getOperation();
  Value input = getInput(), weights = getWeights(), output = getOutput();
  RowOrder inputOrder = getInputOrder(), outputOrder = getOutputOrder();
  if (inputOrder == RowOrder::slot)
    return emitOpError() << "expects input_order token or sorted, got slot";
  if (outputOrder == RowOrder::token)
    return emitOpError() << "expects output_order sorted or slot, got token";

  if (failed(verifyRank(op, "weights", weights, 3, "[E, N, K]")) ||
      failed(
          verifyStaticDims(op, "weights", weights, {0, 1, 2}, "dimensions")) ||
      failed(verifyRank(op, "input", input, 2, "[rows, K]")) ||
      failed(verifyRank(op, "sorted_ids", getSortedIds(), 1, "[C]")))
    return failure();
  // Weight-only quantization keeps the input's float type; otherwise the
  // input and the weights share theirs.
  QuantizationAttr quantization = getQuantizationAttr();
  bool weightOnly = quantization && quantization.isWeightOnly();
  int64_t k = getReductionSize();
  if (failed(verifyWeightScales(op, quantization, "weights", weights,
                                "weight_scales", getWeightScales(), k)))
    return failure();
  if (weightOnly ? failed(verifyFloatInput(op, input))
                 : failed(verifyElementType(
                       op, "input", input,
                       getElementTypeOrSelf(weights.getType()), "weights")))
    return failure();
  int64_t numExperts = dimOf(weights, 0), n = dimOf(weights, 1);
  int64_t numSlots = getNumSlots(), blockM = getBlockM();
  int64_t capacity = dimOf(getSortedIds(), 0);

  FailureOr<int64_t> columns = outputColumns(op, getActivation(), n);
  if (failed(columns) ||
      failed(verifyActivationParameters(op, getActivation(), getSwigluAttr())))
    return failure();
  if (Value bias = getBias())
    if (failed(verifyShape(op, "bias", bias, {numExperts, n}, "[E, N]")))
      return failure();

  // T is known from the token-order input, the routed weights and the
  // slot-order output; all that are static must agree.
  SmallVector<int64_t> tokenCounts;
  if (inputOrder == RowOrder::token)
    tokenCounts.push_back(dimOf(input, 0));
  if (Value routedWeights = getRoutedWeights()) {
    if (failed(verifyRank(op, "routed_weights", routedWeights, 2, "[T, S]")))
      return failure();
    tokenCounts.push_back(dimOf(routedWeights, 0));
  }
  if (outputOrder == RowOrder::slot) {
    if (failed(verifyRank(op, "output", output, 3, "[T, S, N]")))
      return failure();
    tokenCounts.push_back(dimOf(output, 0));
  }
  FailureOr<int64_t> numTokens = mergeTokenCounts(tokenCounts);
  if (failed(numTokens))
    return emitOpError() << "expects one token count T across the input, "
                            "routed_weights and output, got "
                         << formatShape(tokenCounts);

  if (failed(verifyRouting(op, getSortedIds(), getExpertIds(), *numTokens,
                           numSlots, numExperts, blockM)))
    return failure();
  int64_t inputRows = inputOrder == RowOrder::token ? *numTokens : capacity;
  if (failed(verifyShape(op, "input", input, {inputRows, k},
                         inputOrder == RowOrder::token ? "[T, K]" : "[C, K]")))
    return failure();
  if (Value routedWeights = getRoutedWeights())
    if (failed(verifyShape(op, "routed_weights", routedWeights,
                           {*numTokens, numSlots}, "[T, S]")))
      return failure();
  bool scaledInput = quantization && !weightOnly;
  if (static_cast<bool>(getInputScales()) != scaledInput)
    return emitOpError() << "expects 'input_scales' "
                         << (scaledInput ? "with" : "only with")
                         << " quantized (fp8) input rows";
  if (scaledInput &&
      failed(verifyShape(
          op, "input_scales", getInputScales(),
          {inputRows,
           llvm::divideCeilSigned(k, quantization.getActivationGroupSize(k))},
          "[rows, ceil(K / group)]")))
    return failure();
  if (outputOrder == RowOrder::slot) {
    if (failed(verifyShape(op, "output", output,
                           {*numTokens, numSlots, *columns}, "[T, S, N']")))
      return failure();
  } else if (failed(verifyShape(op, "output", output, {capacity, *columns},
                                "[C, N']"))) {
    return failure();
  }

  if (GemmConfigAttr config = getConfigAttr()) {
    if (config.getBlockM() != blockM)
      return emitOpError() << "expects the config's block_m ("
                           << config.getBlockM()
                           << ") to equal the routing block_m (" << blockM
                           << ")";
    int64_t elementBytes =
        getElementTypeOrSelf(input.getType()).getIntOrFloatBitWidth() / 8;
    int64_t bytes = config.getPipelineSharedMemoryBytes(elementBytes);
    // Packed MXFP4 weights land beside the ring's decoded tiles.
    if (int64_t packing = quantization ? quantization.getWeightPacking() : 1;
        packing > 1)
      bytes += config.getNumStages() * config.getBlockN() * config.getBlockK() /
               packing;
    if (bytes > kMaxBlockSharedBytes)
      return emitOpError() << "config needs " << bytes
                           << " bytes of shared memory for its tile ring, "
                              "more than the "
                           << kMaxBlockSharedBytes << " a block can have";
  }
  return verifyTensorMaps();
}

/// A tensor map must be its operand's moe.tensor_map, for a config that
/// loads that operand by TMA, with boxes of the config's K tile (and of one
/// expert, for the weights).
LogicalResult GroupedMatmulOp::verifyTensorMaps() {
  GemmConfigAttr config = getConfigAttr();
  QuantizationAttr quantization = getQuantizationAttr();
  auto verifyMap = [&](Value map, StringRef name, Value source,
                       StringRef sourceName, bool loadsByTma, StringRef flag,
                       int64_t packing) -> LogicalResult {
    if (!map)
      return success();
    if (!config)
      return emitOpError() << "expects a config for its " << name;
    auto mapOp = map.getDefiningOp<TensorMapOp>();
    if (!mapOp || mapOp.getSource() != source)
      return emitOpError() << "expects " << name << " to be the moe.tensor_map "
                           << "of the " << sourceName;
    if (!loadsByTma)
      return emitOpError() << "has a " << name
                           << " but its config does not load the " << sourceName
                           << " by TMA (" << flag << ")";
    ArrayRef<int64_t> box = mapOp.getMapType().getBox();
    if (box.back() * packing != config.getBlockK())
      return emitOpError() << "expects the " << name << " box to span block_k ("
                           << config.getBlockK() << ") "
                           << (packing > 1
                                   ? "values of K in " +
                                         std::to_string(config.getBlockK() /
                                                        packing) +
                                         " packed elements"
                                   : std::string("elements of K"))
                           << ", got " << box.back();
    return success();
  };
  if (getInputMap() && getInputOrder() != RowOrder::sorted)
    return emitOpError() << "expects no input_map for gathered token rows "
                            "(they load by cp.async)";
  if (failed(verifyMap(getInputMap(), "input_map", getInput(), "input",
                       config && config.getTmaA(), "tma_a", 1)) ||
      failed(verifyMap(getWeightsMap(), "weights_map", getWeights(), "weights",
                       config && config.getTmaB(), "tma_b",
                       quantization ? quantization.getWeightPacking() : 1)))
    return failure();
  if (Value weightsMap = getWeightsMap())
    if (cast<TensorMapType>(weightsMap.getType()).getBox().front() != 1)
      return emitOpError() << "expects weights_map boxes of one expert";
  return success();
}

//===----------------------------------------------------------------------===//
// QuantizeOp
//===----------------------------------------------------------------------===//

LogicalResult QuantizeOp::verify() {
  Operation *op = getOperation();
  Value input = getInput();
  if (failed(verifyRank(op, "input", input, 2, "[M, K]")) ||
      failed(verifyStaticDims(op, "input", input, {1}, "row size K")))
    return failure();
  int64_t rows = dimOf(input, 0), k = dimOf(input, 1);
  int64_t groupSize = getGroupSize();
  if (groupSize > k)
    return emitOpError() << "expects a group_size of at most the row size K ("
                         << k << "), got " << groupSize;
  if (failed(verifyShape(op, "output", getOutput(), {rows, k}, "[M, K]")))
    return failure();
  if (Value scale = getScale())
    if (failed(verifyPerTensorScale(op, "scale", scale)))
      return failure();
  return verifyShape(op, "scales", getScales(),
                     {rows, llvm::divideCeilSigned(k, groupSize)},
                     "[M, ceil(K / group_size)]");
}

//===----------------------------------------------------------------------===//
// TensorMapOp
//===----------------------------------------------------------------------===//

LogicalResult TensorMapOp::verify() {
  auto sourceType = cast<RankedTensorType>(getSource().getType());
  TensorMapType mapType = getMapType();
  if (static_cast<int64_t>(mapType.getBox().size()) != sourceType.getRank())
    return emitOpError() << "expects a box of the source's rank ("
                         << sourceType.getRank() << "), got "
                         << mapType.getBox().size() << " dims";
  if (mapType.getElementType() != sourceType.getElementType())
    return emitOpError() << "expects the map's element type "
                         << mapType.getElementType() << " to be the source's ("
                         << sourceType.getElementType() << ")";
  int64_t rowElements = sourceType.getShape().back();
  int64_t rowBytes = rowElements * sourceType.getElementTypeBitWidth() / 8;
  if (ShapedType::isDynamic(rowElements) || rowBytes % 16 != 0)
    return emitOpError() << "expects static source rows of a multiple of 16 "
                            "bytes (TMA strides), got "
                         << sourceType;
  return success();
}

//===----------------------------------------------------------------------===//
// CombineOp
//===----------------------------------------------------------------------===//

LogicalResult CombineOp::verify() {
  Operation *op = getOperation();
  Value rows = getRows();
  if (failed(verifyRank(op, "rows", rows, 3, "[T, S, H]")) ||
      failed(verifyStaticDims(op, "rows", rows, {1, 2}, "S and H")))
    return failure();
  int64_t numTokens = dimOf(rows, 0), numSlots = dimOf(rows, 1),
          hiddenSize = dimOf(rows, 2);
  if (Value weights = getWeights())
    if (failed(verifyShape(op, "weights", weights, {numTokens, numSlots},
                           "[T, S]")))
      return failure();
  if (Value ids = getIds())
    if (failed(verifyShape(op, "ids", ids, {numTokens, numSlots}, "[T, S]")))
      return failure();
  if (static_cast<bool>(getIds()) != getNumExperts().has_value())
    return emitOpError() << "expects 'ids' and 'num_experts' together: the "
                            "ids select the slots in [0, num_experts)";
  if (failed(verifyShape(op, "output", getOutput(), {numTokens, hiddenSize},
                         "[T, H]")))
    return failure();
  return verifyElementType(op, "output", getOutput(),
                           getElementTypeOrSelf(rows.getType()), "rows");
}

//===----------------------------------------------------------------------===//
// EpDispatchOp
//===----------------------------------------------------------------------===//

/// Checks that result `name` has the type of the buffer `init` it updates.
static LogicalResult verifyUpdated(Operation *op, StringRef name, Value result,
                                   Value init) {
  if (result.getType() != init.getType())
    return op->emitOpError() << "expects result '" << name << "' of the type "
                             << "of the buffer it updates (" << init.getType()
                             << "), got " << result.getType();
  return success();
}

LogicalResult EpDispatchOp::verify() {
  Operation *op = getOperation();
  Value hidden = getHiddenStates(), ids = getIds();
  ExpertParallelAttr parallel = getExpertParallel();
  int64_t world = parallel.getWorld(), numExperts = getNumExperts();
  if (failed(verifyRank(op, "hidden_states", hidden, 2, "[T, H]")) ||
      failed(
          verifyStaticDims(op, "hidden_states", hidden, {0, 1}, "T and H")) ||
      failed(verifyRank(op, "ids", ids, 2, "[T, S]")) ||
      failed(verifyStaticDims(op, "ids", ids, {1}, "slot count S")))
    return failure();
  int64_t numTokens = dimOf(hidden, 0), hiddenSize = dimOf(hidden, 1);
  int64_t numSlots = dimOf(ids, 1);
  Value counts = getRecvCounts(), rows = getRecvRows();
  if (failed(verifyShape(op, "ids", ids, {numTokens, numSlots}, "[T, S]")) ||
      failed(verifyShape(op, "weights", getWeights(), {numTokens, numSlots},
                         "[T, S]")) ||
      failed(verifyEvenSplit(op, parallel, numExperts)) ||
      failed(verifyRank(op, "recv_counts", counts, 3, "[W, L, W]")) ||
      failed(verifyStaticDims(op, "recv_counts", counts, {0, 1, 2},
                              "dimensions")) ||
      failed(verifyRank(op, "recv_rows", rows, 3, "[W, L*W*C, H]")) ||
      failed(verifyStaticDims(op, "recv_rows", rows, {0, 1, 2}, "dimensions")))
    return failure();
  int64_t local = dimOf(counts, 1);
  int64_t routedLocal = parallel.getLocalExperts(numExperts);
  if (failed(verifyShape(op, "recv_counts", counts, {world, local, world},
                         "[W, L, W]")))
    return failure();
  if (local < routedLocal)
    return emitOpError() << "expects L = E/W + X >= " << routedLocal
                         << " local experts in 'recv_counts', got " << local;
  FailureOr<ReceiveLayout> layout =
      ReceiveLayout::of(op, counts, 1, "recv_rows", dimOf(rows, 1));
  if (failed(layout))
    return failure();
  if (layout->capacity < numTokens)
    return emitOpError() << "expects a capacity C of at least T = " << numTokens
                         << " rows per (local expert, source "
                         << "rank), so that no region overflows, got "
                         << layout->capacity;
  int64_t recvRows = layout->rows();
  if (failed(verifyShape(op, "recv_rows", rows, {world, recvRows, hiddenSize},
                         "[W, L*W*C, H]")) ||
      failed(verifyElementType(op, "recv_rows", rows,
                               getElementTypeOrSelf(hidden.getType()),
                               "hidden_states")) ||
      failed(verifyShape(op, "recv_weights", getRecvWeights(),
                         {world, recvRows}, "[W, L*W*C]")) ||
      failed(verifyShape(op, "recv_slots", getRecvSlots(), {world, recvRows},
                         "[W, L*W*C]")) ||
      failed(verifyUpdated(op, "rows", getRows(), rows)) ||
      failed(verifyUpdated(op, "routed_weights", getRoutedWeights(),
                           getRecvWeights())) ||
      failed(verifyUpdated(op, "slots", getSlots(), getRecvSlots())))
    return failure();
  return verifyUpdated(op, "counts", getCounts(), counts);
}

//===----------------------------------------------------------------------===//
// EpRouteOp
//===----------------------------------------------------------------------===//

LogicalResult EpRouteOp::verify() {
  Operation *op = getOperation();
  Value counts = getCounts(), sortedIds = getSortedIds();
  int64_t blockM = getBlockM();
  if (failed(verifyRank(op, "counts", counts, 2, "[L, W]")) ||
      failed(verifyStaticDims(op, "counts", counts, {0, 1}, "dimensions")) ||
      failed(verifyRank(op, "sorted_ids", sortedIds, 1,
                        "[L*W*C + L*(block_m-1)]")) ||
      failed(verifyStaticDims(op, "sorted_ids", sortedIds, {0}, "size")) ||
      failed(ReceiveLayout::of(op, counts, 0, "sorted_ids", dimOf(sortedIds, 0),
                               blockM)))
    return failure();
  return verifyShape(op, "expert_ids", getExpertIds(),
                     {getNumBlocks(dimOf(sortedIds, 0), blockM)},
                     "[ceil((L*W*C + L*(block_m-1)) / block_m)]");
}

//===----------------------------------------------------------------------===//
// EpCombineOp
//===----------------------------------------------------------------------===//

LogicalResult EpCombineOp::verify() {
  Operation *op = getOperation();
  Value returned = getReturned(), counts = getCounts(), rows = getRows();
  if (failed(verifyRank(op, "counts", counts, 2, "[L, W]")) ||
      failed(verifyStaticDims(op, "counts", counts, {0, 1}, "dimensions")) ||
      failed(verifyRank(op, "rows", rows, 2, "[L*W*C, H]")) ||
      failed(verifyStaticDims(op, "rows", rows, {0, 1}, "dimensions")) ||
      failed(verifyRank(op, "returned", returned, 4, "[W, C, S, H]")) ||
      failed(verifyStaticDims(op, "returned", returned, {0, 1, 2, 3},
                              "dimensions")))
    return failure();
  FailureOr<ReceiveLayout> layout =
      ReceiveLayout::of(op, counts, 0, "rows", dimOf(rows, 0));
  if (failed(layout) ||
      failed(verifyShape(
          op, "returned", returned,
          {layout->world, layout->capacity, dimOf(returned, 2), dimOf(rows, 1)},
          "[W, C, S, H]")) ||
      failed(
          verifyShape(op, "slots", getSlots(), {layout->rows()}, "[L*W*C]")) ||
      failed(verifyElementType(op, "rows", rows,
                               getElementTypeOrSelf(returned.getType()),
                               "returned")))
    return failure();
  return verifyUpdated(op, "output", getOutput(), returned);
}

//===----------------------------------------------------------------------===//
// EpSignalOp and EpWaitOp
//===----------------------------------------------------------------------===//

/// Checks that `flags` is the [W, W] flags of `parallel`'s world.
static LogicalResult verifyFlags(Operation *op, Value flags,
                                 ExpertParallelAttr parallel) {
  int64_t world = parallel.getWorld();
  if (failed(verifyRank(op, "flags", flags, 2, "[W, W]")) ||
      failed(verifyStaticDims(op, "flags", flags, {0, 1}, "dimensions")))
    return failure();
  return verifyShape(op, "flags", flags, {world, world}, "[W, W]");
}

LogicalResult EpSignalOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyFlags(op, getFlags(), getExpertParallel())))
    return failure();
  return verifyUpdated(op, "output", getOutput(), getFlags());
}

LogicalResult EpWaitOp::verify() {
  Operation *op = getOperation();
  Value status = getStatus();
  if (failed(verifyFlags(op, getFlags(), getExpertParallel())) ||
      failed(verifyRank(op, "status", status, 1, "[2]")) ||
      failed(verifyStaticDims(op, "status", status, {0}, "size")) ||
      failed(verifyShape(op, "status", status, {2}, "[2]")) ||
      failed(verifyUpdated(op, "updated_status", getUpdatedStatus(), status)))
    return failure();
  if (!llvm::is_contained({kExpertsPhase, kCombinePhase}, getPhase()))
    return emitOpError() << "expects 'phase' " << kExpertsPhase
                         << " (the experts phase waits for the dispatch) or "
                         << kCombinePhase
                         << " (the combine phase waits for the experts "
                            "phase), got "
                         << getPhase();
  if (getReady().size() != getGuarded().size())
    return emitOpError() << "expects one result per guarded buffer ("
                         << getGuarded().size() << "), got "
                         << getReady().size();
  for (auto [index, result, guarded] :
       llvm::enumerate(getReady(), getGuarded()))
    if (failed(verifyUpdated(op, "ready #" + std::to_string(index), result,
                             guarded)))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Custom assembly
//===----------------------------------------------------------------------===//

/// A grouped matmul's scales: `scales(%input, %weight)` for fp8 operands,
/// `weight_scales(%weight)` for weight-only quantization, or nothing.
static ParseResult
parseGemmScales(OpAsmParser &parser,
                std::optional<OpAsmParser::UnresolvedOperand> &inputScales,
                std::optional<OpAsmParser::UnresolvedOperand> &weightScales) {
  auto parseOperand =
      [&](std::optional<OpAsmParser::UnresolvedOperand> &operand) {
        operand.emplace();
        return parser.parseOperand(*operand);
      };
  if (succeeded(parser.parseOptionalKeyword("weight_scales")))
    return failure(parser.parseLParen() || parseOperand(weightScales) ||
                   parser.parseRParen());
  if (failed(parser.parseOptionalKeyword("scales")))
    return success();
  return failure(parser.parseLParen() || parseOperand(inputScales) ||
                 parser.parseComma() || parseOperand(weightScales) ||
                 parser.parseRParen());
}

static void printGemmScales(OpAsmPrinter &printer, Operation *,
                            Value inputScales, Value weightScales) {
  if (inputScales)
    printer << "scales(" << inputScales << ", " << weightScales << ")";
  else if (weightScales)
    printer << "weight_scales(" << weightScales << ")";
}

#define GET_OP_CLASSES
#include "moe/Dialect/Moe/IR/MoeOps.cpp.inc"
