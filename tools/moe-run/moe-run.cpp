//===- moe-run.cpp - Run one MoE layer and check it -----------------------===//
//
// Runs one MoE layer end to end: on the GPU (a bundle compiled in-process,
// run by the runtime) or on the CPU path (moe-cpu-pipeline, JIT-compiled),
// as --device says; by default on the GPU when the runtime finds one. The
// layer comes from an MLIR file (a function holding a moe.fused_moe, or the
// primitive ops it decomposes into, or a moe.fused_experts: the experts given
// routing) or from a named model preset. Inputs are seeded random data (an
// experts layer's ids include out-of-range ones, which must contribute
// nothing; an fp8 layer's weights are random values quantized per its
// #moe.quantization, with their scales, and static activation scales are
// calibrated on a draw of tokens apart from the inputs, as checkpoints are
// made); the output is compared against the plain C++ reference, and the
// path, the routing statistics and the times are printed. Exits non-zero on
// any error or mismatch.
//
//===----------------------------------------------------------------------===//

#include "moe/CpuJit/CpuFunction.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Presets/Presets.h"
#include "moe/Reference/Quantization.h"
#include "moe/Reference/Reference.h"
#include "moe/Registration/Registration.h"
#ifdef MOE_ENABLE_RUNTIME
#include "moe/Runtime/Runtime.h"
#include "moe/Target/BundleWriter.h"
#endif

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <unistd.h>

using namespace mlir;
using namespace mlir::moe;
namespace cl = llvm::cl;

// Only these options show in --help: the LLVM back ends linked in register
// hundreds of their own, hidden with cl::HideUnrelatedOptions.
static cl::OptionCategory moeRunCategory("moe-run options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("[layer.mlir]"),
                                      cl::init(""), cl::cat(moeRunCategory));
static cl::opt<std::string>
    presetName("preset",
               cl::desc("Model preset: mixtral-8x7b, qwen3-30b-a3b, "
                        "deepseek-v3, kimi-k2"),
               cl::init(""), cl::cat(moeRunCategory));
static cl::opt<bool>
    reduced("reduced",
            cl::desc("Shrink the preset's hidden and intermediate sizes 32x "
                     "(routing unchanged) so that it runs in seconds"),
            cl::init(false), cl::cat(moeRunCategory));
static cl::opt<int64_t> tokens("tokens", cl::desc("Token count T"),
                               cl::init(16), cl::cat(moeRunCategory));
static cl::opt<std::string>
    dtypeName("dtype",
              cl::desc("Preset element type: bf16, f16 or f32 (with "
                       "--quantization, of the hidden states)"),
              cl::init("bf16"), cl::cat(moeRunCategory));
static cl::opt<std::string> quantization(
    "quantization",
    cl::desc("Quantized weights of the preset, as moe-compile "
             "--quantization: FP8 (e4m3) with fp32 scales per 'tensor', "
             "'channel' or 'block' (128 x 128), 'tensor-static' or "
             "'channel-static' (static activation scales, calibrated on 16 "
             "other tokens), or 'mxfp4' (checked on the weights they decode "
             "to)"),
    cl::init(""), cl::cat(moeRunCategory));
static cl::opt<unsigned> seed("seed", cl::desc("Random seed of the inputs"),
                              cl::init(0), cl::cat(moeRunCategory));
static cl::opt<std::string>
    deviceName("device",
               cl::desc("cpu, gpu, or auto: the GPU when the runtime finds "
                        "one, else the CPU path"),
               cl::init("auto"), cl::cat(moeRunCategory));
static cl::opt<std::string>
    part("part",
         cl::desc("Of a preset or a file's layer: 'layer' (router and "
                  "experts) or 'experts' (moe.fused_experts, on random ids)"),
         cl::init("layer"), cl::cat(moeRunCategory));
static cl::opt<std::string> entry("entry",
                                  cl::desc("Function to run (default: the "
                                           "module's only function)"),
                                  cl::init(""), cl::cat(moeRunCategory));

namespace {
/// Where the layer's operands are among the function's arguments, and what
/// the layer computes.
struct Layer {
  RouterAttr router; // null for experts given their routing
  Activation activation = Activation::none;
  SwigluAttr swiglu; // the clamped SwiGLU's parameters
  int hidden = -1, logits = -1, w13 = -1, w2 = -1, bias = -1;
  // Expert biases (-1 for none), and whether the layer has them.
  int w13Bias = -1, w2Bias = -1;
  bool expertBiases = false;
  int ids = -1, slotWeights = -1; // experts given their routing
  // FP8 weights: their scales and how they scale (else -1 and null), and
  // with static_tensor activations the static scales of the GEMM inputs.
  int w13Scales = -1, w2Scales = -1, w13InputScale = -1, w2InputScale = -1;
  QuantizationAttr quantization;
  // numExperts: routed experts E with a router, stored experts without.
  int64_t hiddenSize = 0, numExperts = 0, intermediate = 0, numSlots = 0;
  // Rows per routing block: the decomposed layer's, or the most
  // moe-decompose chooses.
  int64_t blockM = 2 * kWgmmaRows;

  /// Experts the ids may name: shared experts included.
  int64_t storedExperts() const {
    return numExperts + (router ? router.getNumSharedExperts() : 0);
  }
  /// Whether the caller gives the GEMM inputs' scales.
  bool hasStaticInputScales() const {
    return quantization && quantization.hasStaticActivations();
  }
};

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-run: " << message << "\n";
  return 1;
}

/// Index of `value` among the arguments of `function`, or -1.
int argumentIndex(func::FuncOp function, Value value) {
  auto argument = dyn_cast<BlockArgument>(value);
  if (!argument || argument.getOwner() != &function.getBody().front())
    return -1;
  return argument.getArgNumber();
}

/// Reads the activation of the layer's first GEMM `op` and the argument
/// indices of the expert biases `w13Bias` and `w2Bias` (or nulls).
template <typename Op>
void readEpilogue(func::FuncOp function, Op op, Value w13Bias, Value w2Bias,
                  Layer &layer) {
  layer.activation = op.getActivation();
  layer.swiglu = op.getSwigluAttr();
  layer.expertBiases = static_cast<bool>(w13Bias);
  if (layer.expertBiases) {
    layer.w13Bias = argumentIndex(function, w13Bias);
    layer.w2Bias = argumentIndex(function, w2Bias);
  }
}

/// Reads the argument indices of a layer op's expert weights and biases, of
/// their scales with the quantization for fp8 weights, and its activation.
template <typename LayerOp>
void readExpertWeights(func::FuncOp function, LayerOp op, Layer &layer) {
  readEpilogue(function, op, op.getW13Bias(), op.getW2Bias(), layer);
  layer.w13 = argumentIndex(function, op.getW13());
  layer.w2 = argumentIndex(function, op.getW2());
  layer.quantization = op.getQuantizationAttr();
  if (layer.quantization) {
    layer.w13Scales = argumentIndex(function, op.getW13Scales());
    layer.w2Scales = argumentIndex(function, op.getW2Scales());
  }
  if (layer.hasStaticInputScales()) {
    layer.w13InputScale = argumentIndex(function, op.getW13InputScale());
    layer.w2InputScale = argumentIndex(function, op.getW2InputScale());
  }
}

/// Finds the layer in `function`: a moe.fused_moe, or a moe.gate and the two
/// grouped matmuls of its decomposition, reading operands from arguments.
FailureOr<Layer> findLayer(func::FuncOp function, std::string &error) {
  Layer layer;
  // Inputs and outputs are host tensors.
  for (auto [kind, types] : {std::pair<StringRef, ArrayRef<Type>>{
                                 "argument", function.getArgumentTypes()},
                             {"result", function.getResultTypes()}})
    for (auto [index, type] : llvm::enumerate(types))
      if (!isa<RankedTensorType>(type)) {
        error = (kind + " #" + Twine(index) + " of @" + function.getName() +
                 " is " + llvm::formatv("{0}", type) + ", not a ranked tensor")
                    .str();
        return failure();
      }
  auto dims = [](Value value) {
    return cast<RankedTensorType>(value.getType()).getShape();
  };
  SmallVector<FusedMoeOp> fused(function.getOps<FusedMoeOp>());
  SmallVector<FusedExpertsOp> experts(function.getOps<FusedExpertsOp>());
  SmallVector<GateOp> gates(function.getOps<GateOp>());
  SmallVector<GroupedMatmulOp> gemms(function.getOps<GroupedMatmulOp>());
  if (experts.size() == 1 && fused.empty() && gates.empty() && gemms.empty()) {
    FusedExpertsOp op = experts.front();
    layer.hidden = argumentIndex(function, op.getHiddenStates());
    layer.ids = argumentIndex(function, op.getIds());
    layer.slotWeights = argumentIndex(function, op.getWeights());
    readExpertWeights(function, op, layer);
  } else if (experts.empty() && fused.size() == 1 && gates.empty() &&
             gemms.empty()) {
    FusedMoeOp op = fused.front();
    layer.router = op.getRouter();
    layer.hidden = argumentIndex(function, op.getHiddenStates());
    layer.logits = argumentIndex(function, op.getRouterLogits());
    readExpertWeights(function, op, layer);
    if (op.getCorrectionBias())
      layer.bias = argumentIndex(function, op.getCorrectionBias());
  } else if (fused.empty() && gates.size() == 1 && gemms.size() == 2) {
    GateOp gate = gates.front();
    auto first = llvm::find_if(gemms, [](GroupedMatmulOp op) {
      return op.getInputOrder() == RowOrder::token;
    });
    auto second = llvm::find_if(gemms, [](GroupedMatmulOp op) {
      return op.getInputOrder() == RowOrder::sorted;
    });
    if (first == gemms.end() || second == gemms.end()) {
      error = "expected one token-order and one sorted-order "
              "moe.grouped_matmul";
      return failure();
    }
    if (first->getQuantizationAttr()) {
      error = "an fp8 layer runs as one moe.fused_moe or moe.fused_experts";
      return failure();
    }
    layer.router = gate.getRouter();
    layer.blockM = first->getBlockM();
    readEpilogue(function, *first, first->getBias(), second->getBias(), layer);
    layer.hidden = argumentIndex(function, first->getInput());
    layer.logits = argumentIndex(function, gate.getLogits());
    layer.w13 = argumentIndex(function, first->getWeights());
    layer.w2 = argumentIndex(function, second->getWeights());
    if (gate.getCorrectionBias())
      layer.bias = argumentIndex(function, gate.getCorrectionBias());
  } else {
    error = "expected a function holding one moe.fused_moe, one "
            "moe.fused_experts, or one moe.gate and the two "
            "moe.grouped_matmul of a layer";
    return failure();
  }
  bool routed = static_cast<bool>(layer.router);
  bool fp8 = static_cast<bool>(layer.quantization);
  bool staticInputs = layer.hasStaticInputScales();
  // A routed layer's operands with a bias.
  unsigned withBias =
      5 + (fp8 ? 2 : 0) + (staticInputs ? 2 : 0) + (layer.expertBiases ? 2 : 0);
  if (layer.hidden < 0 || layer.w13 < 0 || layer.w2 < 0 ||
      (layer.expertBiases && (layer.w13Bias < 0 || layer.w2Bias < 0)) ||
      (fp8 && (layer.w13Scales < 0 || layer.w2Scales < 0)) ||
      (staticInputs && (layer.w13InputScale < 0 || layer.w2InputScale < 0)) ||
      (routed ? layer.logits < 0 ||
                    (layer.bias < 0 && function.getNumArguments() == withBias)
              : layer.ids < 0 || layer.slotWeights < 0)) {
    error = "the layer's operands must be the function's arguments";
    return failure();
  }
  if (layer.activation == Activation::none) {
    error = "the layer's first grouped matmul needs a gated activation";
    return failure();
  }
  if (function.getNumResults() != 1) {
    error = "the function must return the layer's output only";
    return failure();
  }
  BlockArgument hidden = function.getArgument(layer.hidden);
  layer.hiddenSize = dims(hidden)[1];
  layer.numExperts = routed ? dims(function.getArgument(layer.logits))[1]
                            : dims(function.getArgument(layer.w13))[0];
  layer.numSlots = routed ? layer.router.getNumSlots()
                          : dims(function.getArgument(layer.ids))[1];
  // I from w13's rows: w2's last dimension holds I/2 packed MXFP4 bytes.
  layer.intermediate = dims(function.getArgument(layer.w13))[1] / 2;
  return layer;
}

reference::Router toReference(RouterAttr router) {
  reference::Router result;
  result.scoring = router.getScoring() == Scoring::softmax
                       ? reference::Scoring::Softmax
                       : reference::Scoring::Sigmoid;
  result.topK = router.getTopK();
  result.numGroups = router.getNumGroups();
  result.topkGroups = router.getTopkGroups();
  result.renormalize = router.getRenormalize();
  result.routedScalingFactor =
      router.getRoutedScalingFactor().convertToDouble();
  result.numSharedExperts = router.getNumSharedExperts();
  return result;
}

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// `shape`'s elements of experts in [0, numExperts), but one in 8 out of
/// range (-1 or numExperts), as an experts layer's ids.
HostTensor randomIds(const std::vector<int64_t> &shape, int64_t numExperts,
                     std::mt19937 &generator) {
  std::uniform_int_distribution<int32_t> expert(0, numExperts - 1);
  std::uniform_int_distribution<int32_t> eighth(0, 7);
  std::vector<int32_t> ids(HostTensor(ElementType::I32, shape).numElements());
  for (int32_t &id : ids)
    id = eighth(generator) ? expert(generator)
                           : (eighth(generator) < 4 ? -1 : numExperts);
  return HostTensor::fromInts(shape, ids);
}

reference::GatedActivation toReference(Activation activation,
                                       SwigluAttr swiglu) {
  if (activation == Activation::clamped_swiglu)
    return reference::GatedActivation::clampedSwiglu(
        swiglu.getAlpha().convertToDouble(),
        swiglu.getLimit().convertToDouble());
  return activation == Activation::silu_and_mul
             ? reference::Activation::SiluAndMul
             : reference::Activation::GeluAndMul;
}

reference::Fp8Scheme toReference(QuantizationAttr quantization) {
  // Fp8Scaling is numbered as WeightScaling.
  return {static_cast<reference::Fp8Scaling>(quantization.getWeights()),
          quantization.getBlockSize()};
}

/// The index of the scale of element (e, n, k) of fp8 weights [E, N, K]
/// among their scales, as `scheme` lays them out.
int64_t scaleIndex(const reference::Fp8Scheme &scheme, int64_t e, int64_t n,
                   int64_t k, int64_t numN, int64_t numK) {
  int64_t b = scheme.blockSize;
  switch (scheme.scaling) {
  case reference::Fp8Scaling::Tensor:
    return e;
  case reference::Fp8Scaling::Channel:
    return e * numN + n;
  case reference::Fp8Scaling::Block:
    return (e * llvm::divideCeil(numN, b) + n / b) * llvm::divideCeil(numK, b) +
           k / b;
  }
  llvm_unreachable("unknown scaling");
}

/// fp8 weights of `shape` [E, N, K] as a checkpoint makes them: `values`
/// rounded to bf16, each scale max(amax, 1e-10) / 448 of the values it
/// scales, each code toE4M3(value / scale). Fills `codes` and `scales` (of
/// `scalesShape`).
void quantizeWeights(const reference::Fp8Scheme &scheme,
                     const std::vector<int64_t> &shape,
                     const std::vector<float> &values,
                     const std::vector<int64_t> &scalesShape, HostTensor &codes,
                     HostTensor &scales) {
  codes = HostTensor(ElementType::F8E4M3FN, shape);
  std::vector<float> amax(
      HostTensor(ElementType::F32, scalesShape).numElements(), 0.0f);
  auto forEach = [&](function_ref<void(int64_t, int64_t, float)> body) {
    for (int64_t e = 0, i = 0; e < shape[0]; ++e)
      for (int64_t n = 0; n < shape[1]; ++n)
        for (int64_t k = 0; k < shape[2]; ++k, ++i)
          body(i, scaleIndex(scheme, e, n, k, shape[1], shape[2]),
               roundTo(ElementType::BF16, values[i]));
  };
  forEach([&](int64_t, int64_t s, float value) {
    amax[s] = std::max(amax[s], std::fabs(value));
  });
  for (float &value : amax)
    value = std::max(value, 1e-10f) / reference::kE4M3Max;
  forEach([&](int64_t i, int64_t s, float value) {
    codes.bytes[i] = reference::toE4M3(value / amax[s]);
  });
  scales = HostTensor::fromFloats(ElementType::F32, scalesShape, amax);
}

/// MXFP4 weights of packed `shape` [E, N, K/2] as gpt-oss's checkpoints
/// make them from `values` [E, N, K] (reference::quantizeMxfp4): `codes`
/// and `scales` (of `scalesShape`, [E, N, K/32]).
void quantizeMxfp4Weights(const std::vector<int64_t> &shape,
                          const std::vector<float> &values,
                          const std::vector<int64_t> &scalesShape,
                          HostTensor &codes, HostTensor &scales) {
  codes = HostTensor(ElementType::I8, shape);
  scales = HostTensor(ElementType::F8E8M0FNU, scalesShape);
  reference::quantizeMxfp4(shape[0] * shape[1], 2 * shape[2], values.data(),
                           codes.bytes.data(), scales.bytes.data());
}

/// Tokens of the draw that static activation scales are calibrated on.
constexpr int64_t kCalibrationTokens = 16;

/// The static input scales of `layer` as a checkpoint's are made: each GEMM
/// input's amax / 448 (reference::calibrateInputScales) over a draw of
/// kCalibrationTokens tokens apart from the inputs, hidden states and
/// routing (the gate on logits with the inputs' bias, or random ids) drawn
/// as makeInputs draws them. The inputs exceed that amax now and then, and
/// saturate as served layers do.
void calibrateInputScales(const Layer &layer, std::vector<HostTensor> &inputs,
                          std::mt19937 &generator) {
  const int64_t tokens = kCalibrationTokens;
  auto draw = [&](int64_t count, float high) {
    std::uniform_real_distribution<float> uniform(-high, high);
    std::vector<float> values(count);
    for (float &value : values)
      value = uniform(generator);
    return values;
  };
  ElementType hiddenType = inputs[layer.hidden].type;
  std::vector<float> hidden = draw(tokens * layer.hiddenSize, 1.0f);
  std::vector<int32_t> ids(tokens * layer.numSlots);
  if (layer.router) {
    std::vector<float> logits = draw(tokens * layer.numExperts, 2.0f);
    std::vector<float> bias =
        layer.bias >= 0 ? inputs[layer.bias].toFloats() : std::vector<float>();
    std::vector<float> slotWeights(ids.size());
    reference::gate(toReference(layer.router), tokens, layer.numExperts,
                    logits.data(), layer.bias >= 0 ? bias.data() : nullptr,
                    slotWeights.data(), ids.data());
  } else {
    ids = randomIds({tokens, layer.numSlots}, layer.numExperts, generator)
              .toInts();
  }
  std::vector<float> w13Scales = inputs[layer.w13Scales].toFloats();
  reference::StaticInputScales scales = reference::calibrateInputScales(
      toReference(layer.quantization),
      toReference(layer.activation, layer.swiglu), tokens, layer.hiddenSize,
      layer.storedExperts(), layer.intermediate, layer.numSlots, hidden.data(),
      ids.data(), inputs[layer.w13].bytes.data(), w13Scales.data(),
      [&](float value) { return roundTo(hiddenType, value); });
  inputs[layer.w13InputScale] =
      HostTensor::fromFloats(ElementType::F32, {1}, {scales.w13});
  inputs[layer.w2InputScale] =
      HostTensor::fromFloats(ElementType::F32, {1}, {scales.w2});
}

/// Seeded inputs of `function`'s arguments, shaped by `shapeOf`:
/// activations and logits of unit scale, weights scaled by 1/sqrt(fan-in) so
/// that outputs stay O(1) in every precision (fp8 weights quantized from
/// such values, with their scales); an experts layer's ids from randomIds
/// and its slot weights in [0, 1).
bool makeInputs(func::FuncOp function, const Layer &layer,
                function_ref<std::vector<int64_t>(int)> shapeOf,
                std::vector<HostTensor> &inputs, std::string &error) {
  std::mt19937 generator(seed);
  inputs.assign(function.getNumArguments(), HostTensor());
  for (BlockArgument argument : function.getArguments()) {
    int index = argument.getArgNumber();
    std::vector<int64_t> shape = shapeOf(index);
    if (index == layer.ids) {
      inputs[index] = randomIds(shape, layer.numExperts, generator);
      continue;
    }
    // Made with their weights, or calibrated once they are made.
    if (index == layer.w13Scales || index == layer.w2Scales ||
        index == layer.w13InputScale || index == layer.w2InputScale)
      continue;
    FailureOr<ElementType> type = getHostElementType(
        cast<RankedTensorType>(argument.getType()).getElementType());
    bool quantizedWeights = index == layer.w13 || index == layer.w2;
    if (failed(type) || *type == ElementType::I32 ||
        *type == ElementType::F8E8M0FNU ||
        ((*type == ElementType::F8E4M3FN || *type == ElementType::I8) &&
         !quantizedWeights)) {
      error = "argument #" + std::to_string(index) +
              " must be a tensor of f32, bf16 or f16";
      return false;
    }
    float high = 1.0f;
    if (index == layer.w13)
      high = 1.0f / std::sqrt(float(layer.hiddenSize));
    else if (index == layer.w2)
      high = 1.0f / std::sqrt(float(layer.intermediate));
    else if (index == layer.logits)
      high = 2.0f;
    else if (index == layer.bias)
      high = 0.1f;
    else if (index == layer.w13Bias || index == layer.w2Bias)
      high = 0.5f;
    float low = index == layer.slotWeights ? 0.0f : -high;
    std::uniform_real_distribution<float> uniform(low, high);
    // Packed MXFP4 weights hold two values of K per element.
    bool mxfp4 = *type == ElementType::I8;
    std::vector<float> data(HostTensor(*type, shape).numElements() *
                            (mxfp4 ? 2 : 1));
    for (float &value : data)
      value = uniform(generator);
    int scalesIndex = index == layer.w13 ? layer.w13Scales : layer.w2Scales;
    if (mxfp4) {
      quantizeMxfp4Weights(shape, data, shapeOf(scalesIndex), inputs[index],
                           inputs[scalesIndex]);
      continue;
    }
    if (*type != ElementType::F8E4M3FN) {
      inputs[index] = HostTensor::fromFloats(*type, shape, data);
      continue;
    }
    quantizeWeights(toReference(layer.quantization), shape, data,
                    shapeOf(scalesIndex), inputs[index], inputs[scalesIndex]);
  }
  if (layer.hasStaticInputScales())
    calibrateInputScales(layer, inputs, generator);
  return true;
}

/// The reference's output of the layer on `inputs`, rounded as stored in
/// `outputType`, and in `slotIds` the experts of the slots: the reference
/// router's choice, or the given ids of an experts layer.
std::vector<float> referenceOutput(const Layer &layer,
                                   const std::vector<HostTensor> &inputs,
                                   int64_t numTokens, ElementType outputType,
                                   std::vector<int32_t> &slotIds) {
  auto floats = [&](int index) {
    return index >= 0 ? inputs[index].toFloats() : std::vector<float>();
  };
  std::vector<float> hidden = floats(layer.hidden);
  std::vector<float> slotWeights(numTokens * layer.numSlots);
  int64_t storedExperts = layer.numExperts;
  if (layer.router) {
    reference::Router router = toReference(layer.router);
    std::vector<float> logits = floats(layer.logits), bias = floats(layer.bias);
    slotIds.assign(numTokens * layer.numSlots, 0);
    reference::gate(router, numTokens, layer.numExperts, logits.data(),
                    layer.bias >= 0 ? bias.data() : nullptr, slotWeights.data(),
                    slotIds.data());
    storedExperts += router.numSharedExperts;
  } else {
    slotIds = inputs[layer.ids].toInts();
    slotWeights = floats(layer.slotWeights);
  }
  std::vector<float> expected(numTokens * layer.hiddenSize);
  reference::GatedActivation activation =
      toReference(layer.activation, layer.swiglu);
  auto round = [&](float value) { return roundTo(outputType, value); };
  std::vector<float> w13Bias = floats(layer.w13Bias),
                     w2Bias = floats(layer.w2Bias);
  reference::ExpertBiases biases;
  if (layer.expertBiases)
    biases = {w13Bias.data(), w2Bias.data()};
  // MXFP4: the layer on the weights the codes decode to (exactly).
  auto weights = [&](int index, int scalesIndex) {
    const HostTensor &codes = inputs[index];
    if (codes.type != ElementType::I8)
      return floats(index);
    return reference::decodeMxfp4(codes.shape[0] * codes.shape[1],
                                  2 * codes.shape[2], codes.bytes.data(),
                                  inputs[scalesIndex].bytes.data());
  };
  if (!layer.quantization || layer.quantization.isWeightOnly()) {
    std::vector<float> w13 = weights(layer.w13, layer.w13Scales),
                       w2 = weights(layer.w2, layer.w2Scales);
    reference::fusedExperts(activation, numTokens, layer.hiddenSize,
                            storedExperts, layer.intermediate, layer.numSlots,
                            hidden.data(), slotIds.data(), slotWeights.data(),
                            w13.data(), w2.data(), expected.data(), round,
                            biases);
    return expected;
  }
  std::vector<float> w13Scales = floats(layer.w13Scales),
                     w2Scales = floats(layer.w2Scales);
  std::optional<reference::StaticInputScales> inputScales;
  if (layer.hasStaticInputScales())
    inputScales = reference::StaticInputScales{floats(layer.w13InputScale)[0],
                                               floats(layer.w2InputScale)[0]};
  reference::fusedExpertsFp8(
      toReference(layer.quantization), activation, numTokens, layer.hiddenSize,
      storedExperts, layer.intermediate, layer.numSlots, hidden.data(),
      slotIds.data(), slotWeights.data(), inputs[layer.w13].bytes.data(),
      w13Scales.data(), inputs[layer.w2].bytes.data(), w2Scales.data(),
      inputScales ? &*inputScales : nullptr, expected.data(), round, biases);
  return expected;
}

/// "E = 16+2, top-3, 4 groups (keep 2), sigmoid + bias" for a layer with a
/// router; "E = 8 experts, 3 given slots per token" for experts alone.
std::string describeRouting(const Layer &layer) {
  if (!layer.router)
    return llvm::formatv("E = {0} experts, {1} given slots per token",
                         layer.numExperts, layer.numSlots);
  RouterAttr router = layer.router;
  return llvm::formatv(
      "E = {0}+{1}, top-{2}, {3} groups (keep {4}), {5}{6}", layer.numExperts,
      router.getNumSharedExperts(), router.getTopK(), router.getNumGroups(),
      router.getTopkGroups(),
      router.getScoring() == Scoring::softmax ? "softmax" : "sigmoid",
      layer.bias >= 0 ? " + bias" : "");
}

#ifdef MOE_ENABLE_RUNTIME
MoeDtype runtimeDtype(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return MOE_DTYPE_F32;
  case ElementType::BF16:
    return MOE_DTYPE_BF16;
  case ElementType::F16:
    return MOE_DTYPE_F16;
  case ElementType::I32:
    return MOE_DTYPE_I32;
  case ElementType::F8E4M3FN:
    return MOE_DTYPE_F8E4M3;
  case ElementType::I8:
  case ElementType::F8E8M0FNU:
    return MOE_DTYPE_U8;
  }
  return MOE_DTYPE_F32;
}

/// Compiles the layer to a bundle sized for `numTokens`, runs it on device 0
/// on `inputs` and fetches its one output. The run is timed after a warm-up,
/// synchronised, as the median of five.
bool runOnGpu(ModuleOp module, const std::vector<HostTensor> &inputs,
              int64_t numTokens, std::vector<HostTensor> &outputs,
              double &compileTime, double &runTime, std::string &error) {
  namespace rt = ::moe::runtime;
  llvm::SmallString<128> directory;
  if (std::error_code code =
          llvm::sys::fs::createUniqueDirectory("moe-run", directory)) {
    error = "cannot create a bundle directory: " + code.message();
    return false;
  }
  llvm::scope_exit cleanup(
      [&] { llvm::sys::fs::remove_directories(directory); });
  auto start = std::chrono::steady_clock::now();
  OwningOpRef<ModuleOp> clone(module.clone());
  BundleOptions options;
  options.pipeline.tokensMax = numTokens;
  if (llvm::Error compileError = compileBundle(*clone, options, directory)) {
    error = llvm::toString(std::move(compileError));
    return false;
  }
  compileTime = seconds(start);

  std::unique_ptr<rt::Bundle> bundle;
  rt::Status status = rt::Bundle::open(std::string(directory), 0, bundle);
  std::vector<void *> buffers;
  llvm::scope_exit freeBuffers([&] {
    for (void *buffer : buffers)
      (void)rt::freeDevice(0, buffer);
  });
  std::vector<MoeTensor> tensors;
  auto describe = [&](const HostTensor &tensor, void *data) {
    MoeTensor described{data,
                        runtimeDtype(tensor.type),
                        static_cast<int32_t>(tensor.shape.size()),
                        {}};
    for (size_t d = 0; d < tensor.shape.size(); ++d)
      described.dims[d] = tensor.shape[d];
    tensors.push_back(described);
  };
  for (const HostTensor &input : inputs) {
    void *buffer = nullptr;
    if (status.ok())
      status = rt::allocateDevice(0, input.bytes.size(), buffer);
    if (status.ok()) {
      buffers.push_back(buffer);
      status =
          rt::copyToDevice(0, buffer, input.bytes.data(), input.bytes.size());
    }
    describe(input, buffer);
  }
  MoeTensorInfo info;
  if (status.ok())
    status = bundle->tensorInfo(bundle->numTensors() - 1, numTokens, info);
  HostTensor output;
  if (status.ok()) {
    ElementType type = info.dtype == MOE_DTYPE_BF16  ? ElementType::BF16
                       : info.dtype == MOE_DTYPE_F16 ? ElementType::F16
                                                     : ElementType::F32;
    output = HostTensor(type,
                        std::vector<int64_t>(info.dims, info.dims + info.rank));
    void *buffer = nullptr;
    status = rt::allocateDevice(0, output.bytes.size(), buffer);
    if (status.ok())
      buffers.push_back(buffer);
    describe(output, buffer);
  }
  std::vector<double> times;
  for (int run = 0; status.ok() && run < 6; ++run) {
    start = std::chrono::steady_clock::now();
    status = bundle->run(numTokens, tensors.data(),
                         static_cast<int>(tensors.size()), nullptr);
    if (status.ok())
      status = rt::synchronizeDevice(0);
    if (run > 0)
      times.push_back(seconds(start));
  }
  if (status.ok())
    status = rt::copyToHost(0, output.bytes.data(), tensors.back().data,
                            output.bytes.size());
  if (!status.ok()) {
    error = "GPU path: " + status.message();
    return false;
  }
  llvm::sort(times);
  runTime = times[times.size() / 2];
  outputs.push_back(std::move(output));
  return true;
}
#endif
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(moeRunCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "moe-run: run one MoE layer on the GPU or the CPU path and check it "
      "against the reference\n\n  moe-run --preset deepseek-v3 --reduced "
      "--tokens 16\n"
      "  moe-run layer.mlir --tokens 4\n");

  MLIRContext context;
  DialectRegistry registry;
  registerMoeDialects(registry);
  context.appendDialectRegistry(registry);
  registerMoePasses();

  if (std::optional<std::string> bad = checkSizeOption("--tokens", tokens, 1))
    return fail(*bad);
  if (deviceName != "cpu" && deviceName != "gpu" && deviceName != "auto")
    return fail("unknown --device '" + deviceName + "' (cpu, gpu, auto)");
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  LayerSource source{inputFile,         presetName,       part,
                     dtypeName,         reduced ? 32 : 1, /*blockM=*/64,
                     /*layerSizes=*/"", quantization};
  std::string label = source.label(), error;
  OwningOpRef<ModuleOp> module =
      parseLayerSource(source, context, sourceMgr, error);
  if (!module)
    return fail(error);

  func::FuncOp function;
  for (auto candidate : module->getOps<func::FuncOp>())
    if (!candidate.isDeclaration() &&
        (entry.empty() || candidate.getName() == entry))
      function = candidate;
  if (!function)
    return fail("no function to run in " + label);
  FailureOr<Layer> layer = findLayer(function, error);
  if (failed(layer))
    return fail(label + ": " + error);

  // Shapes: every `?` is the token count.
  int64_t numTokens = tokens;
  auto hiddenType =
      cast<RankedTensorType>(function.getArgument(layer->hidden).getType());
  if (!hiddenType.isDynamicDim(0)) {
    if (tokens.getNumOccurrences() && tokens != hiddenType.getDimSize(0))
      return fail(llvm::formatv("--tokens {0} does not match the layer's {1} "
                                "tokens",
                                int64_t(tokens), hiddenType.getDimSize(0))
                      .str());
    numTokens = hiddenType.getDimSize(0);
  }
  auto shapeOf = [&](int index) {
    auto type = cast<RankedTensorType>(function.getArgument(index).getType());
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    for (int64_t &dim : shape)
      if (ShapedType::isDynamic(dim))
        dim = numTokens;
    return shape;
  };
  // Slot ids and routed rows are i32 on both paths.
  if (std::optional<std::string> overflow = describeRoutingOverflow(
          numTokens, layer->numSlots, layer->storedExperts(), layer->blockM))
    return fail(
        llvm::formatv("{0} at T = {1}: {2}", label, numTokens, *overflow)
            .str());
  // In floating point, which no layer's sizes overflow.
  double totalBytes = 0;
  for (BlockArgument argument : function.getArguments()) {
    auto type = cast<RankedTensorType>(argument.getType());
    double elements = 1;
    for (int64_t dim : shapeOf(argument.getArgNumber()))
      elements *= dim;
    totalBytes += elements * type.getElementTypeBitWidth() / 8;
  }
  // Inputs, their fp32 copies for the reference, and the compiled path's
  // buffers: refuse what would not fit instead of dying half way.
  int64_t memoryBytes = sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
  if (totalBytes * 4 > memoryBytes)
    return fail(llvm::formatv("{0} needs about {1:F1} GiB of host memory for "
                              "T = {2}; this machine has {3:F1} GiB (try "
                              "--reduced or fewer tokens)",
                              label, totalBytes * 4 / (1 << 30), numTokens,
                              memoryBytes * 1.0 / (1 << 30))
                    .str());

  std::vector<HostTensor> inputs;
  if (!makeInputs(function, *layer, shapeOf, inputs, error))
    return fail(error);
  ElementType outputType = inputs[layer->hidden].type;

  // The path: the GPU when asked for, or (auto) when the runtime finds one.
  std::string path = "CPU";
  std::string note;
#ifdef MOE_ENABLE_RUNTIME
  if (deviceName != "cpu") {
    ::moe::runtime::Status probe = ::moe::runtime::synchronizeDevice(0);
    if (probe.ok())
      path = "GPU";
    else if (deviceName == "gpu")
      return fail("--device gpu: " + probe.message());
    else
      note = " (no GPU: " + probe.message() + ")";
  }
#else
  if (deviceName == "gpu")
    return fail("--device gpu: this moe-run was built without the runtime "
                "(no cuda.h)");
#endif
  std::vector<HostTensor> outputs;
  double compileTime = 0, runTime = 0;
#ifdef MOE_ENABLE_RUNTIME
  // With --device auto a GPU that cannot take the layer (no toolkit for
  // libdevice, say) falls back to the CPU path and says why.
  if (path == "GPU" && !runOnGpu(*module, inputs, numTokens, outputs,
                                 compileTime, runTime, error)) {
    if (deviceName == "gpu")
      return fail(error);
    path = "CPU";
    note = " (the GPU path failed: " + error + ")";
  }
#endif
  if (path == "CPU") {
    auto start = std::chrono::steady_clock::now();
    auto compiled = CpuFunction::compile(*module, function.getName());
    if (!compiled)
      return fail(llvm::toString(compiled.takeError()));
    compileTime = seconds(start);
    start = std::chrono::steady_clock::now();
    auto results = (*compiled)->run(inputs);
    if (!results)
      return fail(llvm::toString(results.takeError()));
    runTime = seconds(start);
    outputs = std::move(*results);
  }

  std::vector<int32_t> slotIds;
  std::vector<float> expected =
      referenceOutput(*layer, inputs, numTokens, outputType, slotIds);
  // Routing statistics, of the reference router's or the given ids.
  std::vector<int64_t> perExpert(layer->storedExperts());
  int64_t dropped = 0;
  for (int32_t id : slotIds) {
    if (id >= 0 && id < static_cast<int64_t>(perExpert.size()))
      ++perExpert[id];
    else
      ++dropped;
  }

  std::vector<float> actual = outputs.front().toFloats();
  double maxError = 0, maxReference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    maxError = std::max(maxError, double(std::fabs(actual[i] - expected[i])));
    maxReference = std::max(maxReference, double(std::fabs(expected[i])));
  }
  double relative = maxError / std::max(maxReference, 1e-30);
  // The reference rounds where the layer stores, so only the fp32
  // summation order of the GEMMs separates the two: a few units in the last
  // place of the output type.
  double tolerance = outputType == ElementType::F32   ? 1e-5
                     : outputType == ElementType::F16 ? 4e-3
                                                      : 2e-2;

  llvm::outs() << llvm::formatv(
      "moe-run: {0}, T = {1}, {2}: H = {3}, I = {4}, {5}\n", label, numTokens,
      elementTypeName(outputType), layer->hiddenSize, layer->intermediate,
      describeRouting(*layer));
  llvm::outs() << llvm::formatv(
      "  {0} path{1}: compile {2:F2} s, run {3:F3} ms\n", path, note,
      compileTime, runTime * 1e3);
  if (layer->hasStaticInputScales())
    llvm::outs() << llvm::formatv(
        "  static input scales, calibrated on {0} other tokens: w13 {1:E2}, "
        "w2 {2:E2}\n",
        kCalibrationTokens, inputs[layer->w13InputScale].toFloats()[0],
        inputs[layer->w2InputScale].toFloats()[0]);
  int64_t idle = llvm::count(perExpert, 0);
  auto [least, most] = std::minmax_element(perExpert.begin(), perExpert.end());
  llvm::outs() << llvm::formatv(
      "  routing: {0} slots over {1} experts{2}; tokens per expert min {3}, "
      "max {4}, {5} experts without tokens\n  tokens per expert:",
      numTokens * layer->numSlots, perExpert.size(),
      layer->router ? std::string()
                    : llvm::formatv(" ({0} ids out of range)", dropped).str(),
      *least, *most, idle);
  for (size_t e = 0; e < perExpert.size(); ++e)
    llvm::outs() << (e % 32 == 0 ? "\n   " : "") << " " << perExpert[e];
  bool pass = relative <= tolerance && std::isfinite(relative);
  llvm::outs() << llvm::formatv(
      "\n  check against the reference: max |error| {0:E2}, max |reference| "
      "{1:E2}, relative {2:E2} (tolerance {3:E0}): {4}\n",
      maxError, maxReference, relative, tolerance, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
