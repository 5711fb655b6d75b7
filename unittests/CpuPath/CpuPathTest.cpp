//===- CpuPathTest.cpp - The CPU path against the plain C++ reference -----===//
//
// Each test compiles one moe op (a primitive, or an fp8 layer) through
// moe-cpu-pipeline, runs it with mlir::ExecutionEngine on seeded data (or on
// the corner case it pins down) and compares the result with the independent
// reference in lib/Reference: ids and routing exactly, values to a stated
// tolerance, and everything fp8 (the lowerings' e4m3 encoder and decoder,
// moe.quantize, the scaled grouped matmuls, whole fp8 layers) bit for bit,
// as the op descriptions fix the order of every rounding.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/CpuJit/CpuFunction.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"
#include "moe/Reference/Quantization.h"
#include "moe/Reference/Reference.h"
#include "moe/Registration/Registration.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>

using namespace mlir;
using namespace mlir::moe;

namespace {

MLIRContext &sharedContext() {
  static MLIRContext *context = [] {
    DialectRegistry registry;
    registerMoeDialects(registry);
    registerMoePasses();
    auto *created = new MLIRContext(registry);
    created->loadAllAvailableDialects();
    return created;
  }();
  return *context;
}

/// Parses `source` and compiles its function for the CPU.
std::unique_ptr<CpuFunction> compile(const std::string &source) {
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, &sharedContext());
  if (!module) {
    ADD_FAILURE() << "does not parse:\n" << source;
    return nullptr;
  }
  auto compiled = CpuFunction::compile(*module);
  if (!compiled) {
    ADD_FAILURE() << llvm::toString(compiled.takeError());
    return nullptr;
  }
  return std::move(*compiled);
}

std::vector<HostTensor> run(const CpuFunction &function,
                            const std::vector<HostTensor> &inputs) {
  auto outputs = function.run(inputs);
  if (!outputs) {
    ADD_FAILURE() << llvm::toString(outputs.takeError());
    return {};
  }
  return std::move(*outputs);
}

std::vector<float> uniform(std::mt19937 &generator, int64_t count,
                           float scale) {
  std::uniform_real_distribution<float> distribution(-scale, scale);
  std::vector<float> values(count);
  for (float &value : values)
    value = distribution(generator);
  return values;
}

/// Ids of `t` tokens x `s` slots (t * s >= 8) over `e` experts as a caller
/// routes: uniform, but for -1 (an expert held elsewhere) at slot 1, E at
/// slot 5, both out of range and skipped, and slot 7 naming slot 6's
/// expert again, which runs twice.
std::vector<int32_t> givenIds(std::mt19937 &generator, int64_t t, int64_t s,
                              int64_t e) {
  std::uniform_int_distribution<int32_t> expert(0, e - 1);
  std::vector<int32_t> ids(t * s);
  for (int32_t &id : ids)
    id = expert(generator);
  ids[1] = -1;
  ids[5] = e;
  ids[7] = ids[6];
  return ids;
}

const char *name(ElementType type) { return elementTypeName(type); }

//===----------------------------------------------------------------------===//
// moe.gate
//===----------------------------------------------------------------------===//

struct GateCase {
  int64_t numTokens, numExperts;
  reference::Router router;
  bool bias;
  ElementType logitsType = ElementType::F32;
};

std::string routerText(const reference::Router &router) {
  return llvm::formatv(
      "#moe.router<scoring = {0}, top_k = {1}, num_groups = {2}, topk_groups "
      "= {3}, renormalize = {4}, routed_scaling_factor = {5:e9}, "
      "num_shared_experts = {6}>",
      router.scoring == reference::Scoring::Softmax ? "softmax" : "sigmoid",
      router.topK, router.numGroups, router.topkGroups,
      router.renormalize ? "true" : "false", router.routedScalingFactor,
      router.numSharedExperts);
}

/// Runs moe.gate on `logits` through the CPU path and the reference; checks
/// ids exactly and weights to 1e-6, and returns the CPU path's results.
std::pair<std::vector<float>, std::vector<int32_t>>
checkGate(const GateCase &gate, const std::vector<float> &logits,
          const std::vector<float> &bias) {
  int64_t t = gate.numTokens, e = gate.numExperts;
  int64_t s = gate.router.numSlots();
  std::string logitsType =
      llvm::formatv("tensor<?x{0}x{1}>", e, name(gate.logitsType));
  std::string biasType = llvm::formatv("tensor<{0}xf32>", e);
  std::string results =
      llvm::formatv("(tensor<?x{0}xf32>, tensor<?x{0}xi32>)", s);
  std::string source = llvm::formatv(
      "func.func @gate(%l: {0}{1}) -> {2} {{\n"
      "  %w, %i = moe.gate %l{3} {{router = {4}} : ({0}{5}) -> {2}\n"
      "  return %w, %i : tensor<?x{6}xf32>, tensor<?x{6}xi32>\n}\n",
      logitsType, gate.bias ? ", %b: " + biasType : "", results,
      gate.bias ? " bias %b" : "", routerText(gate.router),
      gate.bias ? ", " + biasType : "", s);
  std::unique_ptr<CpuFunction> function = compile(source);
  if (!function)
    return {};
  std::vector<HostTensor> inputs = {
      HostTensor::fromFloats(gate.logitsType, {t, e}, logits)};
  if (gate.bias)
    inputs.push_back(HostTensor::fromFloats(ElementType::F32, {e}, bias));
  std::vector<HostTensor> outputs = run(*function, inputs);
  if (outputs.size() != 2)
    return {};

  std::vector<float> expectedWeights(t * s);
  std::vector<int32_t> expectedIds(t * s);
  std::vector<float> roundedLogits = inputs[0].toFloats();
  reference::gate(gate.router, t, e, roundedLogits.data(),
                  gate.bias ? bias.data() : nullptr, expectedWeights.data(),
                  expectedIds.data());
  std::vector<float> weights = outputs[0].toFloats();
  std::vector<int32_t> ids = outputs[1].toInts();
  EXPECT_EQ(ids, expectedIds);
  for (int64_t i = 0; i < t * s; ++i)
    EXPECT_NEAR(weights[i], expectedWeights[i],
                1e-6 * std::max(1.0f, std::fabs(expectedWeights[i])))
        << "slot " << i;
  // Whatever the logits: in-range, distinct ids and finite weights.
  for (int64_t row = 0; row < t; ++row) {
    std::set<int32_t> distinct;
    for (int64_t slot = 0; slot < s; ++slot) {
      int32_t id = ids[row * s + slot];
      EXPECT_GE(id, 0);
      EXPECT_LT(id, e + gate.router.numSharedExperts);
      distinct.insert(id);
      EXPECT_TRUE(std::isfinite(weights[row * s + slot]));
    }
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), s) << "row " << row;
  }
  return {weights, ids};
}

std::pair<std::vector<float>, std::vector<int32_t>>
checkRandomGate(const GateCase &gate, unsigned seed) {
  std::mt19937 generator(seed);
  std::vector<float> logits =
      uniform(generator, gate.numTokens * gate.numExperts, 3.0f);
  std::vector<float> bias = uniform(generator, gate.numExperts, 0.5f);
  return checkGate(gate, logits, bias);
}

reference::Router softmaxTopK(int64_t topK, bool renormalize) {
  reference::Router router;
  router.topK = topK;
  router.renormalize = renormalize;
  return router;
}

reference::Router deepseekRouter() {
  reference::Router router;
  router.scoring = reference::Scoring::Sigmoid;
  router.topK = 8;
  router.numGroups = 8;
  router.topkGroups = 4;
  router.renormalize = true;
  router.routedScalingFactor = 2.5f;
  router.numSharedExperts = 1;
  return router;
}

TEST(Gate, SoftmaxTopK) {
  checkRandomGate({33, 128, softmaxTopK(8, true), false}, 1);
  checkRandomGate({9, 8, softmaxTopK(2, false), false}, 2);
}

TEST(Gate, SigmoidWithBias) {
  reference::Router router;
  router.scoring = reference::Scoring::Sigmoid;
  router.topK = 6;
  checkRandomGate({21, 64, router, true}, 3);
}

TEST(Gate, DeepSeekGroupedTopKWithBias) {
  auto [weights, ids] = checkRandomGate({17, 256, deepseekRouter(), true}, 4);
  // Every routed id lies in one of 4 groups of 32; the shared expert is 256.
  for (int64_t t = 0; t < 17 && !ids.empty(); ++t) {
    std::set<int32_t> groups;
    for (int64_t s = 0; s < 8; ++s)
      groups.insert(ids[t * 9 + s] / 32);
    EXPECT_LE(groups.size(), 4u);
    EXPECT_EQ(ids[t * 9 + 8], 256);
    EXPECT_EQ(weights[t * 9 + 8], 1.0f);
  }
}

TEST(Gate, KimiK2OneGroupOf384) {
  reference::Router router;
  router.scoring = reference::Scoring::Sigmoid;
  router.topK = 8;
  router.renormalize = true;
  router.routedScalingFactor = 2.827f;
  router.numSharedExperts = 1;
  checkRandomGate({19, 384, router, true}, 5);
}

TEST(Gate, SharedExpertsAndOneToken) {
  reference::Router router = softmaxTopK(4, true);
  router.numSharedExperts = 2;
  auto [weights, ids] = checkRandomGate({1, 16, router, false}, 6);
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids[4], 16);
  EXPECT_EQ(ids[5], 17);
  EXPECT_EQ(weights[4], 1.0f);
  EXPECT_EQ(weights[5], 1.0f);
}

TEST(Gate, Bf16Logits) {
  GateCase gate{12, 64, softmaxTopK(4, true), false, ElementType::BF16};
  checkRandomGate(gate, 7);
}

TEST(Gate, NaNRowsYieldDistinctIdsAndZeroWeights) {
  for (reference::Scoring scoring :
       {reference::Scoring::Softmax, reference::Scoring::Sigmoid}) {
    reference::Router router = deepseekRouter();
    router.scoring = scoring;
    std::mt19937 generator(8);
    std::vector<float> logits = uniform(generator, 3 * 256, 3.0f);
    std::vector<float> bias(256, 0.0f);
    // Row 0 all NaN; row 1 NaN in every other expert; row 2 untouched.
    for (int64_t e = 0; e < 256; ++e) {
      logits[e] = NAN;
      if (e % 2 == 0)
        logits[256 + e] = NAN;
    }
    auto [weights, ids] = checkGate({3, 256, router, true}, logits, bias);
    ASSERT_EQ(ids.size(), 27u);
    for (int64_t s = 0; s < 8; ++s) {
      // An all-NaN row falls back to the lowest indices, weighing nothing.
      EXPECT_EQ(ids[s], s);
      EXPECT_EQ(weights[s], 0.0f);
    }
    // Half the experts have a number: none of the NaN ones is chosen.
    for (int64_t s = 0; s < 8; ++s) {
      EXPECT_EQ(ids[9 + s] % 2, 1) << "a NaN expert was chosen";
      EXPECT_GT(weights[9 + s], 0.0f);
    }
  }
}

TEST(Gate, SoftmaxLeavesNaNLogitsOut) {
  // A NaN logit changes no other score: row 0 scores as row 1, whose -inf
  // logits score 0, and a NaN expert comes last (slot 4, weight 0).
  const float nan = NAN, inf = INFINITY;
  std::vector<float> logits = {1, nan,  2, nan,  3, nan,  0.5f, nan,
                               1, -inf, 2, -inf, 3, -inf, 0.5f, -inf};
  auto [weights, ids] =
      checkGate({2, 8, softmaxTopK(5, false), false}, logits, {});
  ASSERT_EQ(ids.size(), 10u);
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 2, 0, 6, 1, 4, 2, 0, 6, 1}));
  EXPECT_EQ(std::vector<float>(weights.begin(), weights.begin() + 5),
            std::vector<float>(weights.begin() + 5, weights.end()));
  EXPECT_EQ(weights[4], 0.0f);
  EXPECT_NEAR(weights[0] + weights[1] + weights[2] + weights[3], 1.0f, 1e-6);
}

TEST(Gate, SoftmaxInfiniteLogitsShareTheWholeWeight) {
  const float nan = NAN, inf = INFINITY;
  std::vector<float> logits = {
      0.5f, -1,   3,    0,    7,    inf,  2,    1,    // one +inf
      0.5f, -1,   inf,  0,    7,    1,    inf,  1,    // two +inf
      nan,  -inf, 0.5f, inf,  7,    1,    2,    1,    // +inf, -inf and NaN
      -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, // all -inf
  };
  auto [weights, ids] =
      checkGate({4, 8, softmaxTopK(3, false), false}, logits, {});
  ASSERT_EQ(ids.size(), 12u);
  // The rest score 0 (ties: the lowest indices), NaN below them.
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 0, 1, 2, 6, 0, 3, 1, 2, 0, 1, 2}));
  EXPECT_EQ(weights, (std::vector<float>{1, 0, 0, 0.5f, 0.5f, 0, 1, 0, 0,
                                         0.125f, 0.125f, 0.125f}));
}

TEST(Gate, SigmoidOfInfiniteAndNaNLogits) {
  reference::Router router;
  router.scoring = reference::Scoring::Sigmoid;
  router.topK = 5;
  const float nan = NAN, inf = INFINITY;
  std::vector<float> logits = {nan, -inf, inf, 0, nan, inf, -inf, nan};
  auto [weights, ids] = checkGate({1, 8, router, false}, logits, {});
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 5, 3, 1, 6}));
  EXPECT_EQ(weights, (std::vector<float>{1, 1, 0.5f, 0, 0}));
}

TEST(Gate, TiesGoToTheLowerIndex) {
  reference::Router router = softmaxTopK(4, true);
  std::vector<float> logits(2 * 32, 0.5f);
  logits[32 + 7] = logits[32 + 3] = 1.0f; // Two tied winners in row 1.
  auto [weights, ids] = checkGate({2, 32, router, false}, logits, {});
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2, 3, 3, 7, 0, 1}));
  EXPECT_FLOAT_EQ(weights[0], 0.25f);
}

/// gpt-oss's router after its linear: the top `k` of `logits` [E] (ties to
/// the lower index, which torch.topk does not promise), then a softmax over
/// the k chosen, in double: (ids, weights).
std::pair<std::vector<int32_t>, std::vector<double>>
gptOssRouter(const float *logits, int64_t numExperts, int64_t k) {
  std::vector<int32_t> order(numExperts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  order.resize(k);
  std::vector<double> weights(k);
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i)
    sum += weights[i] = std::exp(double(logits[order[i]]) - logits[order[0]]);
  for (double &weight : weights)
    weight /= sum;
  return {order, weights};
}

/// moe.gate with softmax, top-4 and renormalize is gpt-oss's router (top-4
/// of the logits, softmax over those): the same ids, weights within 2e-6,
/// on bf16-valued logits as gpt-oss's bf16 linear makes them, with rows of
/// exact ties inside the four and across the fourth place.
TEST(Gate, GptOssTopKThenSoftmaxIsSoftmaxTopKRenormalize) {
  reference::Router router = softmaxTopK(4, /*renormalize=*/true);
  for (int64_t e : {32, 128}) {
    SCOPED_TRACE(e);
    const int64_t t = 257;
    std::mt19937 generator(25);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(t * e);
    for (float &logit : logits)
      logit = roundTo(ElementType::BF16, normal(generator));
    // Row 0: four experts tie for the first place; row 1: experts 9 and 5
    // tie for the fourth place (one of them left out); row 2: all tie.
    for (int64_t i : {3, 17, 20, 30})
      logits[i] = 9.0f;
    for (int64_t i : {1, 2, 3})
      logits[e + i] = 8.0f + i;
    logits[e + 9] = logits[e + 5] = 7.5f;
    std::fill(logits.begin() + 2 * e, logits.begin() + 3 * e, 0.25f);
    auto [weights, ids] =
        checkGate({t, e, router, false, ElementType::BF16}, logits, {});
    ASSERT_EQ(ids.size(), static_cast<size_t>(t * 4));
    for (int64_t row = 0; row < t; ++row) {
      auto [expectedIds, expectedWeights] =
          gptOssRouter(logits.data() + row * e, e, 4);
      for (int64_t slot = 0; slot < 4; ++slot) {
        EXPECT_EQ(ids[row * 4 + slot], expectedIds[slot])
            << "row " << row << " slot " << slot;
        EXPECT_NEAR(weights[row * 4 + slot], expectedWeights[slot], 2e-6)
            << "row " << row << " slot " << slot;
      }
    }
    EXPECT_EQ(std::vector<int32_t>(ids.begin() + 4, ids.begin() + 8),
              (std::vector<int32_t>{3, 2, 1, 5}));
  }
}

/// Where the two differ: distinct f32 logits whose differences from the
/// max round to one fp32 value score the same, and moe.gate takes the lower
/// index where gpt-oss's top-k of the logits takes the larger logit. Their
/// weights agree to 1e-6 (DESIGN.md, section 8, states the bound).
TEST(Gate, GptOssNearTiesBelowTheScoresRoundingMayPickTheLowerIndex) {
  reference::Router router = softmaxTopK(4, /*renormalize=*/true);
  std::vector<float> logits(32, -4.0f);
  logits[0] = logits[1] = logits[2] = 8.0f;
  // 0.1 - 8 and its neighbour - 8 round to one float: one score.
  logits[4] = 0.1f;
  logits[6] = std::nextafter(0.1f, 1.0f);
  auto [weights, ids] = checkGate({1, 32, router, false}, logits, {});
  auto [expectedIds, expectedWeights] = gptOssRouter(logits.data(), 32, 4);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(expectedIds, (std::vector<int32_t>{0, 1, 2, 6}));
  for (int64_t slot = 0; slot < 4; ++slot)
    EXPECT_NEAR(weights[slot], expectedWeights[slot], 1e-6);
}

TEST(Gate, ZeroSumRenormalisationStaysFinite) {
  reference::Router router;
  router.scoring = reference::Scoring::Sigmoid;
  router.topK = 4;
  router.renormalize = true;
  // sigmoid(-200) is 0 in fp32: the chosen weights sum to zero.
  std::vector<float> logits(16, -200.0f);
  auto [weights, ids] = checkGate({1, 16, router, false}, logits, {});
  ASSERT_EQ(weights.size(), 4u);
  for (float weight : weights)
    EXPECT_EQ(weight, 0.0f);
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

void checkRoute(int64_t t, int64_t s, int64_t e, int64_t blockM,
                const std::vector<int32_t> &ids) {
  std::string source = llvm::formatv(
      "func.func @route(%i: tensor<?x{0}xi32>) -> (tensor<?xi32>, "
      "tensor<?xi32>, tensor<i32>) {{\n"
      "  %s, %e, %n = moe.route %i {{num_experts = {1}, block_m = {2}} : "
      "(tensor<?x{0}xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)\n"
      "  return %s, %e, %n : tensor<?xi32>, tensor<?xi32>, tensor<i32>\n}\n",
      s, e, blockM);
  std::unique_ptr<CpuFunction> function = compile(source);
  ASSERT_TRUE(function);
  std::vector<HostTensor> outputs =
      run(*function, {HostTensor::fromInts({t, s}, ids)});
  ASSERT_EQ(outputs.size(), 3u);
  reference::Routing expected = reference::route(t, s, ids.data(), e, blockM);
  EXPECT_EQ(outputs[0].toInts(), expected.sortedIds);
  EXPECT_EQ(outputs[1].toInts(), expected.expertIds);
  EXPECT_EQ(outputs[2].toInts(), std::vector<int32_t>{expected.numPadded});
}

TEST(Route, RandomIdsWithIdleExperts) {
  std::mt19937 generator(9);
  // Experts 0..15 of 24 only: 8 experts get no tokens and no blocks.
  std::uniform_int_distribution<int32_t> expert(0, 15);
  std::vector<int32_t> ids(50 * 4);
  for (int32_t &id : ids)
    id = expert(generator);
  checkRoute(50, 4, 24, 8, ids);
  checkRoute(50, 4, 24, 1, ids);
}

TEST(Route, OneTokenAndOutOfRangeIds) {
  checkRoute(1, 3, 8, 16, {5, 2, 7});
  // Ids outside [0, E) are dropped rather than written out of bounds.
  checkRoute(2, 2, 4, 4, {-1, 3, 9, 3});
}

//===----------------------------------------------------------------------===//
// moe.grouped_matmul and moe.combine
//===----------------------------------------------------------------------===//

struct GemmCase {
  ElementType type;
  // none, silu_and_mul, gelu_and_mul, clamped_swiglu (kSwiglu's)
  const char *activation;
  bool tokenInput, sortedOutput, routedWeights;
  /// FP8: input rows and weights in e4m3 with fp32 scales per this scheme
  /// (else both of `type`, the output's type).
  std::optional<reference::Fp8Scheme> fp8 = std::nullopt;
  int64_t n = 24, k = 40;
  /// A bias [E, N] of this type, or none.
  std::optional<ElementType> bias = std::nullopt;
};

/// The clamped SwiGLU of the tests: gpt-oss's alpha, and a limit the sums
/// of the tests' small operands exceed (gpt-oss's is 7), so that both
/// clamps act.
constexpr float kSwigluAlpha = 1.702f, kSwigluLimit = 0.5f;
constexpr const char *kSwiglu = "#moe.swiglu<alpha = 1.702, limit = 0.5>";

/// The `swiglu` attribute entry an op with `activation` carries, or "".
std::string swigluEntry(llvm::StringRef activation) {
  return activation == "clamped_swiglu"
             ? llvm::formatv(", swiglu = {0}", kSwiglu).str()
             : "";
}

reference::GatedActivation toReference(llvm::StringRef activation) {
  if (activation == "silu_and_mul")
    return reference::Activation::SiluAndMul;
  if (activation == "gelu_and_mul")
    return reference::Activation::GeluAndMul;
  if (activation == "clamped_swiglu")
    return reference::GatedActivation::clampedSwiglu(kSwigluAlpha,
                                                     kSwigluLimit);
  return reference::Activation::None;
}

/// Relative tolerance of one stored element: the reference rounds where the
/// op stores, so only fp32 summation order separates the two.
float tolerance(ElementType type) {
  return type == ElementType::F32   ? 1e-5f
         : type == ElementType::F16 ? 2e-3f
                                    : 1e-2f;
}

void expectClose(const std::vector<float> &actual,
                 const std::vector<float> &expected, float relative) {
  ASSERT_EQ(actual.size(), expected.size());
  float scale = 1e-30f;
  for (float value : expected)
    scale = std::max(scale, std::fabs(value));
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_LE(std::fabs(actual[i] - expected[i]), relative * scale)
        << "element " << i << ": " << actual[i] << " vs " << expected[i];
}

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// Expects the same floats bit for bit, any NaN matching any NaN.
void expectSameBits(const std::vector<float> &actual,
                    const std::vector<float> &expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    if (!std::isnan(actual[i]) || !std::isnan(expected[i]))
      EXPECT_EQ(bitsOf(actual[i]), bitsOf(expected[i]))
          << "element " << i << ": " << actual[i] << " vs " << expected[i];
}

/// The #moe.quantization of `scheme`, with static_tensor activations when
/// `staticInputs`.
std::string quantizationText(const reference::Fp8Scheme &scheme,
                             bool staticInputs = false) {
  bool block = scheme.scaling == reference::Fp8Scaling::Block;
  const char *weights = block ? "block"
                        : scheme.scaling == reference::Fp8Scaling::Channel
                            ? "channel"
                            : "tensor";
  const char *activations = staticInputs ? "static_tensor"
                            : block      ? "token_group"
                                         : "token";
  return llvm::formatv(
      "#moe.quantization<weights = {0}, activations = {1}, block_size = {2}>",
      weights, activations, scheme.blockSize);
}

/// The shape of the scales of e4m3 weights [e, n, k] under `scheme`.
std::vector<int64_t> weightScalesShape(const reference::Fp8Scheme &scheme,
                                       int64_t e, int64_t n, int64_t k) {
  int64_t b = scheme.blockSize;
  switch (scheme.scaling) {
  case reference::Fp8Scaling::Tensor:
    return {e};
  case reference::Fp8Scaling::Channel:
    return {e, n};
  case reference::Fp8Scaling::Block:
    return {e, (n + b - 1) / b, (k + b - 1) / b};
  }
  return {};
}

/// Random finite e4m3 codes of both signs (0x7F and 0xFF are NaN).
HostTensor randomE4M3(std::mt19937 &generator, std::vector<int64_t> shape) {
  HostTensor tensor(ElementType::F8E4M3FN, std::move(shape));
  std::uniform_int_distribution<int> magnitude(0, 0x7E), sign(0, 1);
  for (uint8_t &code : tensor.bytes)
    code = static_cast<uint8_t>(magnitude(generator) | sign(generator) << 7);
  return tensor;
}

/// Random positive scales in [2^-10, 2^-2), of the magnitudes checkpoints
/// have.
HostTensor randomScales(std::mt19937 &generator, std::vector<int64_t> shape) {
  HostTensor tensor(ElementType::F32, std::move(shape));
  std::uniform_real_distribution<float> exponent(-10.0f, -2.0f);
  std::vector<float> values(tensor.numElements());
  for (float &value : values)
    value = std::exp2(exponent(generator));
  return HostTensor::fromFloats(ElementType::F32, tensor.shape, values);
}

/// Runs `gemm` through the CPU path and the reference on seeded operands
/// routed with an idle expert; fp8 results must match bit for bit (the
/// reference multiplies and adds in the op's order), others to tolerance.
void checkGroupedMatmul(const GemmCase &gemm) {
  const int64_t t = 7, s = 3, e = 5, blockM = 4, n = gemm.n, k = gemm.k;
  bool gated = llvm::StringRef(gemm.activation) != "none";
  int64_t columns = gated ? n / 2 : n;
  std::mt19937 generator(10);
  // Expert 1 gets no token, so its weights must never be read.
  std::vector<int32_t> ids(t * s);
  for (int64_t i = 0; i < t * s; ++i)
    ids[i] = (i * 7 + i / 5) % e == 1 ? 3 : (i * 7 + i / 5) % e;
  reference::Routing routing = reference::route(t, s, ids.data(), e, blockM);
  int64_t capacity = routing.sortedIds.size();
  int64_t blocks = routing.expertIds.size();
  int64_t rows = gemm.tokenInput ? t : capacity;

  const std::optional<reference::Fp8Scheme> &fp8 = gemm.fp8;
  HostTensor input =
      fp8 ? randomE4M3(generator, {rows, k})
          : HostTensor::fromFloats(gemm.type, {rows, k},
                                   uniform(generator, rows * k, 1.0f));
  HostTensor weights =
      fp8 ? randomE4M3(generator, {e, n, k})
          : HostTensor::fromFloats(gemm.type, {e, n, k},
                                   uniform(generator, e * n * k, 0.2f));
  HostTensor routedWeights = HostTensor::fromFloats(
      ElementType::F32, {t, s}, uniform(generator, t * s, 1.0f));
  HostTensor inputScales, weightScales;
  if (fp8) {
    inputScales = randomScales(generator, {rows, fp8->numGroups(k)});
    weightScales = randomScales(generator, weightScalesShape(*fp8, e, n, k));
  }
  HostTensor bias;
  if (gemm.bias)
    bias = HostTensor::fromFloats(*gemm.bias, {e, n},
                                  uniform(generator, e * n, 1.0f));

  std::string outputType =
      gemm.sortedOutput
          ? HostTensor(gemm.type, {capacity, columns}).typeString()
          : HostTensor(gemm.type, {t, s, columns}).typeString();
  std::vector<HostTensor> inputs = {
      input, weights, HostTensor::fromInts({capacity}, routing.sortedIds),
      HostTensor::fromInts({blocks}, routing.expertIds),
      HostTensor::fromInts({}, {routing.numPadded})};
  std::string operands = "%a0, %a1, %a2, %a3, %a4";
  if (gemm.routedWeights) {
    operands += " routed_weights(%a5)";
    inputs.push_back(routedWeights);
  }
  if (gemm.bias) {
    operands += llvm::formatv(" bias(%a{0})", inputs.size());
    inputs.push_back(bias);
  }
  if (fp8) {
    operands += llvm::formatv(" scales(%a{0}, %a{1})", inputs.size(),
                              inputs.size() + 1);
    inputs.push_back(inputScales);
    inputs.push_back(weightScales);
  }
  std::string arguments, types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string type = inputs[i].typeString();
    arguments += llvm::formatv("{0}%a{1}: {2}", i ? ", " : "", i, type);
    types += (i ? ", " : "") + type;
  }
  std::string source = llvm::formatv(
      "func.func @gemm({0}) -> {1} {{\n"
      "  %o = moe.grouped_matmul {2} input({3}) output({4}) activation({5}) "
      "{{block_m = {6}, num_slots = {7}{8}{10}} : ({9}) -> {1}\n"
      "  return %o : {1}\n}\n",
      arguments, outputType, operands, gemm.tokenInput ? "token" : "sorted",
      gemm.sortedOutput ? "sorted" : "slot", gemm.activation, blockM, s,
      fp8 ? ", quantization = " + quantizationText(*fp8) : "", types,
      swigluEntry(gemm.activation));
  std::unique_ptr<CpuFunction> function = compile(source);
  ASSERT_TRUE(function);
  std::vector<HostTensor> outputs = run(*function, inputs);
  ASSERT_EQ(outputs.size(), 1u);

  // Rows the op never stores (padding) stay zero on the CPU path.
  std::vector<float> expected((gemm.sortedOutput ? capacity : t * s) * columns,
                              0.0f);
  std::vector<float> rwValues = routedWeights.toFloats();
  const float *rw = gemm.routedWeights ? rwValues.data() : nullptr;
  auto round = [&](float value) { return roundTo(gemm.type, value); };
  std::vector<float> biasValues =
      gemm.bias ? bias.toFloats() : std::vector<float>();
  const float *biasData = gemm.bias ? biasValues.data() : nullptr;
  if (fp8) {
    std::vector<float> inputScaleValues = inputScales.toFloats(),
                       weightScaleValues = weightScales.toFloats();
    reference::scaledGroupedMatmul(
        *fp8, routing, t, s, blockM, n, k, input.bytes.data(),
        inputScaleValues.data(), gemm.tokenInput, weights.bytes.data(),
        weightScaleValues.data(), rw, toReference(gemm.activation),
        gemm.sortedOutput, expected.data(), round, biasData);
    expectSameBits(outputs[0].toFloats(), expected);
    return;
  }
  std::vector<float> inputValues = input.toFloats(),
                     weightValues = weights.toFloats();
  reference::groupedMatmul(routing, t, s, blockM, n, k, inputValues.data(),
                           gemm.tokenInput, weightValues.data(), rw,
                           toReference(gemm.activation), gemm.sortedOutput,
                           expected.data(), round, biasData);
  expectClose(outputs[0].toFloats(), expected, tolerance(gemm.type));
}

TEST(GroupedMatmul, BiasAndClampedSwiglu) {
  for (ElementType type :
       {ElementType::F32, ElementType::BF16, ElementType::F16})
    for (const char *activation : {"none", "silu_and_mul", "clamped_swiglu"})
      for (bool tokenInput : {true, false})
        for (ElementType biasType : {ElementType::F32, type}) {
          SCOPED_TRACE(llvm::formatv("{0} {1} token={2} bias {3}", name(type),
                                     activation, tokenInput, name(biasType))
                           .str());
          // The first GEMM's orders, and the second's with routed weights.
          checkGroupedMatmul({type, activation, tokenInput, tokenInput,
                              !tokenInput, std::nullopt, 24, 40, biasType});
        }
}

TEST(GroupedMatmul, EveryEpilogueOrderAndType) {
  for (ElementType type :
       {ElementType::F32, ElementType::BF16, ElementType::F16})
    for (const char *activation : {"none", "silu_and_mul", "gelu_and_mul"})
      for (bool tokenInput : {true, false})
        for (bool sortedOutput : {true, false})
          for (bool routedWeights : {false, true}) {
            SCOPED_TRACE(llvm::formatv("{0} {1} token={2} sorted={3} rw={4}",
                                       name(type), activation, tokenInput,
                                       sortedOutput, routedWeights)
                             .str());
            checkGroupedMatmul(
                {type, activation, tokenInput, sortedOutput, routedWeights});
          }
}

TEST(GroupedMatmul, Fp8EverySchemeBitExact) {
  using reference::Fp8Scaling;
  // Blocks of 16 leave ragged K (40 = 16 + 16 + 8) and N (24 = 16 + 8)
  // tails, and the gated halves' up columns start inside a block; blocks of
  // 128 as checkpoints have them, with K = 200 and N = 136.
  struct Shape {
    reference::Fp8Scheme scheme;
    int64_t n, k;
  };
  for (Shape shape : {Shape{{Fp8Scaling::Block, 16}, 24, 40},
                      Shape{{Fp8Scaling::Block, 128}, 136, 200},
                      Shape{{Fp8Scaling::Channel, 128}, 24, 40},
                      Shape{{Fp8Scaling::Tensor, 128}, 24, 40}})
    for (ElementType type : {ElementType::F32, ElementType::BF16})
      for (const char *activation : {"none", "silu_and_mul", "gelu_and_mul"})
        for (bool tokenInput : {true, false}) {
          SCOPED_TRACE(llvm::formatv("{0} n={1} k={2} {3} {4} token={5}",
                                     quantizationText(shape.scheme), shape.n,
                                     shape.k, name(type), activation,
                                     tokenInput)
                           .str());
          // Token rows go to sorted rows (the first GEMM), sorted rows to
          // slots with routed weights (the second).
          checkGroupedMatmul({type, activation, tokenInput, tokenInput,
                              !tokenInput, shape.scheme, shape.n, shape.k});
        }
}

TEST(GroupedMatmul, Fp8BiasAfterTheScalesBitExact) {
  for (reference::Fp8Scheme scheme :
       {reference::Fp8Scheme{reference::Fp8Scaling::Block, 16},
        reference::Fp8Scheme{reference::Fp8Scaling::Channel, 128}})
    for (const char *activation : {"silu_and_mul", "clamped_swiglu"})
      for (bool tokenInput : {true, false}) {
        SCOPED_TRACE(llvm::formatv("{0} {1} token={2}",
                                   quantizationText(scheme), activation,
                                   tokenInput)
                         .str());
        checkGroupedMatmul({ElementType::BF16, activation, tokenInput,
                            tokenInput, !tokenInput, scheme, 24, 40,
                            ElementType::BF16});
      }
}

TEST(Combine, WeightedAndUnweighted) {
  const int64_t t = 6, s = 3, h = 20;
  std::mt19937 generator(11);
  for (ElementType type : {ElementType::F32, ElementType::BF16})
    for (bool weighted : {false, true}) {
      std::string elt = name(type);
      std::string rows = llvm::formatv("tensor<?x{0}x{1}x{2}>", s, h, elt);
      std::string out = llvm::formatv("tensor<?x{0}x{1}>", h, elt);
      std::string w = llvm::formatv("tensor<?x{0}xf32>", s);
      std::string source = llvm::formatv(
          "func.func @combine(%r: {0}{1}) -> {2} {{\n"
          "  %y = moe.combine %r{3} : ({0}{4}) -> {2}\n"
          "  return %y : {2}\n}\n",
          rows, weighted ? ", %w: " + w : "", out,
          weighted ? " weights(%w)" : "", weighted ? ", " + w : "");
      std::unique_ptr<CpuFunction> function = compile(source);
      ASSERT_TRUE(function);
      HostTensor rowValues = HostTensor::fromFloats(
          type, {t, s, h}, uniform(generator, t * s * h, 1.0f));
      HostTensor weights = HostTensor::fromFloats(
          ElementType::F32, {t, s}, uniform(generator, t * s, 1.0f));
      std::vector<HostTensor> inputs = {rowValues};
      if (weighted)
        inputs.push_back(weights);
      std::vector<HostTensor> outputs = run(*function, inputs);
      ASSERT_EQ(outputs.size(), 1u);
      std::vector<float> expected(t * h);
      std::vector<float> rowFloats = rowValues.toFloats(),
                         weightFloats = weights.toFloats();
      reference::combine(
          t, s, h, rowFloats.data(), weighted ? weightFloats.data() : nullptr,
          expected.data(), [&](float value) { return roundTo(type, value); });
      expectClose(outputs[0].toFloats(), expected, tolerance(type));
    }
}

//===----------------------------------------------------------------------===//
// FP8: e4m3 conversions and moe.quantize
//===----------------------------------------------------------------------===//

/// A function @convert(tensor<?x`from`>) -> tensor<?x`to`> converting each
/// element through f32 by LoopBuilder's loadF32 and storeF32, which every
/// lowering's e4m3 operands go through: the e4m3 encoder when `to` is
/// f8E4M3FN, the decoder when `from` is.
std::unique_ptr<CpuFunction> compileConversion(Type from, Type to) {
  Location loc = UnknownLoc::get(&sharedContext());
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  auto fromType = RankedTensorType::get({ShapedType::kDynamic}, from);
  auto toType = RankedTensorType::get({ShapedType::kDynamic}, to);
  OpBuilder builder = OpBuilder::atBlockEnd(module->getBody());
  auto function = func::FuncOp::create(
      builder, loc, "convert", builder.getFunctionType(fromType, toType));
  ImplicitLocOpBuilder b(loc, builder);
  b.setInsertionPointToStart(function.addEntryBlock());
  LoopBuilder lb{b};
  Value input = lb.toBuffer(function.getArgument(0));
  Value size = lb.dim(input, 0);
  Value output = lb.alloc(toType, size);
  lb.loop(lb.index(0), size,
          [&](Value i) { lb.storeF32(lb.loadF32(input, i), output, i); });
  func::ReturnOp::create(b, lb.toTensor(toType, output));
  auto compiled = CpuFunction::compile(*module);
  if (!compiled) {
    ADD_FAILURE() << llvm::toString(compiled.takeError());
    return nullptr;
  }
  return std::move(*compiled);
}

float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// f32 values at every e4m3 rounding decision, with both signs: each e4m3
/// value and each midpoint between neighbours (ties), with the floats just
/// below and above them; the saturation bound (448, the tie 464, 480 and
/// beyond, FLT_MAX, infinity); NaNs (quiet, signalling, negative); f32
/// subnormals and the smallest normal; and seeded random bit patterns.
std::vector<float> e4m3DecisionPoints() {
  std::vector<float> points;
  const float inf = std::numeric_limits<float>::infinity();
  auto around = [&](float value) {
    points.push_back(std::nextafter(value, -inf));
    points.push_back(value);
    points.push_back(std::nextafter(value, inf));
  };
  for (uint8_t code = 0; code < 0x7E; ++code) {
    float low = reference::fromE4M3(code);
    around(low);
    around((low + reference::fromE4M3(code + 1)) / 2); // exact in f32
  }
  for (float value :
       {448.0f, 464.0f, 480.0f, 512.0f, 1e6f, FLT_MAX, inf, FLT_MIN,
        std::numeric_limits<float>::denorm_min(), 0x1p-10f, 0x1p-149f * 3})
    around(value);
  for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0x7FA00000u})
    points.push_back(floatOf(bits));
  std::mt19937 generator(20);
  for (int i = 0; i < (1 << 16); ++i)
    points.push_back(floatOf(generator()));
  size_t positive = points.size();
  for (size_t i = 0; i < positive; ++i)
    points.push_back(-points[i]);
  return points;
}

TEST(Fp8, EncodesEveryDecisionPointAsTheReference) {
  MLIRContext &context = sharedContext();
  std::unique_ptr<CpuFunction> encode = compileConversion(
      Float32Type::get(&context), Float8E4M3FNType::get(&context));
  ASSERT_TRUE(encode);
  std::vector<float> points = e4m3DecisionPoints();
  int64_t count = points.size();
  HostTensor values(ElementType::F32, {count});
  std::memcpy(values.bytes.data(), points.data(), values.bytes.size());
  std::vector<HostTensor> outputs = run(*encode, {values});
  ASSERT_EQ(outputs.size(), 1u);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < count && mismatches < 20; ++i) {
    uint8_t expected = reference::toE4M3(points[i]);
    if (outputs[0].bytes[i] == expected)
      continue;
    ++mismatches;
    ADD_FAILURE()
        << llvm::formatv(
               "f32 {0:x8} ({1:e9}): code {2:x2}, the reference {3:x2}",
               bitsOf(points[i]), points[i], outputs[0].bytes[i], expected)
               .str();
  }
}

TEST(Fp8, DecodesEveryCodeExactly) {
  MLIRContext &context = sharedContext();
  std::unique_ptr<CpuFunction> decode = compileConversion(
      Float8E4M3FNType::get(&context), Float32Type::get(&context));
  ASSERT_TRUE(decode);
  HostTensor codes(ElementType::F8E4M3FN, {256});
  for (int code = 0; code < 256; ++code)
    codes.bytes[code] = static_cast<uint8_t>(code);
  std::vector<HostTensor> outputs = run(*decode, {codes});
  ASSERT_EQ(outputs.size(), 1u);
  std::vector<float> expected(256);
  for (int code = 0; code < 256; ++code)
    expected[code] = reference::fromE4M3(static_cast<uint8_t>(code));
  std::vector<float> values = outputs[0].toFloats();
  expectSameBits(values, expected);
  EXPECT_TRUE(std::isnan(values[0x7F]) && std::isnan(values[0xFF]));
  EXPECT_TRUE(std::signbit(values[0x80])) << "-0 keeps its sign";
}

/// Runs moe.quantize on `x` [rows, k] of `type` (rows(%n) when `numRows` is
/// set, scale(%s) when `staticScale` is) and expects the reference's codes
/// and scales bit for bit in the rows it computes.
void checkQuantize(ElementType type, int64_t rows, int64_t k, int64_t groupSize,
                   const std::vector<float> &x,
                   std::optional<int32_t> numRows = std::nullopt,
                   std::optional<float> staticScale = std::nullopt) {
  int64_t groups = (k + groupSize - 1) / groupSize;
  std::vector<HostTensor> inputs = {HostTensor::fromFloats(type, {rows, k}, x)};
  std::string arguments = llvm::formatv("%x: tensor<?x{0}x{1}>", k, name(type));
  std::string types = inputs[0].typeString(), operands;
  types = "tensor<?" + types.substr(types.find('x'));
  if (staticScale) {
    inputs.push_back(
        HostTensor::fromFloats(ElementType::F32, {1}, {*staticScale}));
    arguments += ", %s: tensor<1xf32>";
    types += ", tensor<1xf32>";
    operands += " scale(%s)";
  }
  if (numRows) {
    inputs.push_back(HostTensor::fromInts({}, {*numRows}));
    arguments += ", %n: tensor<i32>";
    types += ", tensor<i32>";
    operands += " rows(%n)";
  }
  std::string results =
      llvm::formatv("tensor<?x{0}xf8E4M3FN>, tensor<?x{1}xf32>", k, groups);
  std::string source = llvm::formatv(
      "func.func @quantize({0}) -> ({1}) {{\n"
      "  %q, %scales = moe.quantize %x{2} {{group_size = {3}} : ({4}) -> "
      "({1})\n  return %q, %scales : {1}\n}\n",
      arguments, results, operands, groupSize, types);
  std::unique_ptr<CpuFunction> function = compile(source);
  ASSERT_TRUE(function);
  std::vector<HostTensor> outputs = run(*function, inputs);
  ASSERT_EQ(outputs.size(), 2u);

  int64_t computed = std::clamp<int64_t>(numRows.value_or(rows), 0, rows);
  std::vector<uint8_t> codes(computed * k);
  std::vector<float> scales(computed * groups);
  std::vector<float> stored = inputs[0].toFloats();
  if (staticScale)
    reference::quantizeE4M3Static(computed, k, groupSize, *staticScale,
                                  stored.data(), codes.data(), scales.data());
  else
    reference::quantizeE4M3(computed, k, groupSize, stored.data(), codes.data(),
                            scales.data());
  EXPECT_EQ(std::vector<uint8_t>(outputs[0].bytes.begin(),
                                 outputs[0].bytes.begin() + computed * k),
            codes);
  std::vector<float> actualScales = outputs[1].toFloats();
  actualScales.resize(computed * groups);
  expectSameBits(actualScales, scales);
}

/// Rows of k columns that reach every branch of the recipe: uniform values;
/// magnitudes spread over 2^-30..2^10 (e4m3 subnormals and underflow after
/// scaling); all zeros (the 1e-10 floor); a NaN in the first group; an
/// infinity in the last (its group's scale is infinite); each group led by
/// 448 (scale 1) followed by exact e4m3 midpoints; and signed zeros with
/// f32 subnormals.
std::vector<float> quantizeEdgeRows(int64_t k, int64_t groupSize) {
  std::mt19937 generator(21);
  std::vector<float> x = uniform(generator, 7 * k, 3.0f);
  std::uniform_real_distribution<float> exponent(-30.0f, 10.0f);
  for (int64_t c = 0; c < k; ++c) {
    float sign = c % 2 ? -1.0f : 1.0f;
    x[k + c] = sign * std::exp2(exponent(generator));
    x[2 * k + c] = 0.0f;
    uint8_t code = static_cast<uint8_t>(c % 0x7E);
    x[5 * k + c] =
        c % groupSize == 0
            ? 448.0f
            : sign *
                  (reference::fromE4M3(code) + reference::fromE4M3(code + 1)) /
                  2;
    x[6 * k + c] = c % 3 == 0 ? -0.0f : sign * 0x1p-140f * (c + 1);
  }
  x[3 * k + 1] = std::numeric_limits<float>::quiet_NaN();
  x[4 * k + k - 1] = std::numeric_limits<float>::infinity();
  return x;
}

TEST(Quantize, EveryBranchBitExactPerGroupAndPerRow) {
  const int64_t k = 200;
  for (ElementType type :
       {ElementType::F32, ElementType::BF16, ElementType::F16})
    for (int64_t groupSize : {128, 200, 7, 1}) {
      SCOPED_TRACE(
          llvm::formatv("{0} group_size={1}", name(type), groupSize).str());
      checkQuantize(type, 7, k, groupSize, quantizeEdgeRows(k, groupSize));
    }
}

TEST(Quantize, RowsStopAtTheCountClampedToTheRows) {
  const int64_t k = 200;
  std::vector<float> x = quantizeEdgeRows(k, 128);
  for (int32_t numRows : {0, 3, 7, 100}) {
    SCOPED_TRACE(llvm::formatv("rows({0})", numRows).str());
    checkQuantize(ElementType::BF16, 7, k, 128, x, numRows);
  }
}

TEST(Quantize, StaticScaleBitExact) {
  // The edge rows by scales that saturate their larger values (2^-6, and
  // 0.0071, whose quotients are inexact), keep them all in range (2^4),
  // and by the degenerate ones used as given: 0, infinity, NaN.
  const int64_t k = 200;
  const float inf = std::numeric_limits<float>::infinity();
  for (ElementType type :
       {ElementType::F32, ElementType::BF16, ElementType::F16})
    for (float scale : {0x1p-6f, 0.0071f, 16.0f, 0.0f, inf,
                        std::numeric_limits<float>::quiet_NaN()})
      for (int64_t groupSize : {200, 128}) {
        SCOPED_TRACE(llvm::formatv("{0} scale={1} group_size={2}", name(type),
                                   scale, groupSize)
                         .str());
        checkQuantize(type, 7, k, groupSize, quantizeEdgeRows(k, groupSize),
                      std::nullopt, scale);
      }
  checkQuantize(ElementType::BF16, 7, k, 200, quantizeEdgeRows(k, 200), 4,
                0.0071f);
}

//===----------------------------------------------------------------------===//
// FP8 layers: moe.fused_moe and moe.fused_experts through moe-cpu-pipeline
//===----------------------------------------------------------------------===//

/// Seeded e4m3 expert weights w13 [stored, 2I, H] and w2 [stored, H, I] with
/// their scales under `scheme`.
struct Fp8Experts {
  HostTensor w13, w2, w13Scales, w2Scales;

  Fp8Experts(std::mt19937 &generator, const reference::Fp8Scheme &scheme,
             int64_t stored, int64_t hidden, int64_t intermediate)
      : w13(randomE4M3(generator, {stored, 2 * intermediate, hidden})),
        w2(randomE4M3(generator, {stored, hidden, intermediate})),
        w13Scales(randomScales(
            generator,
            weightScalesShape(scheme, stored, 2 * intermediate, hidden))),
        w2Scales(
            randomScales(generator, weightScalesShape(scheme, stored, hidden,
                                                      intermediate))) {}
};

/// Static input scales for fp8 experts on `hidden` (as stored) routed by
/// `ids`, at 3/4 of those the reference's calibration finds, so that the
/// largest values of both GEMM inputs saturate.
reference::StaticInputScales
saturatingInputScales(const reference::Fp8Scheme &scheme,
                      reference::Activation activation,
                      const HostTensor &hidden, const std::vector<int32_t> &ids,
                      const Fp8Experts &experts) {
  std::vector<float> values = hidden.toFloats(),
                     w13Scales = experts.w13Scales.toFloats();
  int64_t t = hidden.shape[0], h = hidden.shape[1];
  reference::StaticInputScales scales = reference::calibrateInputScales(
      scheme, activation, t, h, experts.w13.shape[0], experts.w2.shape[2],
      ids.size() / t, values.data(), ids.data(), experts.w13.bytes.data(),
      w13Scales.data(),
      [&](float value) { return roundTo(hidden.type, value); });
  return {0.75f * scales.w13, 0.75f * scales.w2};
}

/// Appends `scales` to `inputs` as the [1] tensors of `input_scales(...)`,
/// and returns that text.
std::string appendInputScales(const reference::StaticInputScales &scales,
                              std::vector<HostTensor> &inputs) {
  size_t first = inputs.size();
  for (float scale : {scales.w13, scales.w2})
    inputs.push_back(HostTensor::fromFloats(ElementType::F32, {1}, {scale}));
  return llvm::formatv(" input_scales(%a{0}, %a{1})", first, first + 1);
}

/// `func.func @layer(%a0: ..., %a1: ...) -> result` returning the one op
/// `op`, which names its operands %a0, %a1... in the order of `inputs`; the
/// first `perToken` inputs have the token count as a dynamic first
/// dimension, as a serving engine calls a layer.
std::string layerFunction(const std::vector<HostTensor> &inputs,
                          size_t perToken, const std::string &op,
                          const std::string &result) {
  std::string arguments, types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string type = inputs[i].typeString();
    if (i < perToken)
      type = "tensor<?" + type.substr(type.find('x'));
    arguments += llvm::formatv("{0}%a{1}: {2}", i ? ", " : "", i, type);
    types += (i ? ", " : "") + type;
  }
  return llvm::formatv("func.func @layer({0}) -> {1} {{\n"
                       "  %y = {2} : ({3}) -> {1}\n"
                       "  return %y : {1}\n}\n",
                       arguments, result, op, types);
}

/// The CPU path's output of the one-op layer `op` on `inputs` (the first
/// the hidden states), or empty.
std::vector<float> runLayer(const std::vector<HostTensor> &inputs,
                            size_t perToken, const std::string &op) {
  std::string result = llvm::formatv("tensor<?x{0}x{1}>", inputs[0].shape[1],
                                     name(inputs[0].type));
  std::unique_ptr<CpuFunction> function =
      compile(layerFunction(inputs, perToken, op, result));
  if (!function)
    return {};
  std::vector<HostTensor> outputs = run(*function, inputs);
  return outputs.size() == 1 ? outputs[0].toFloats() : std::vector<float>();
}

/// A whole fp8 layer with hidden states of `type`, H = 200 and I = 72
/// (ragged against 128-wide blocks), DeepSeek-like routing with a shared
/// expert, through moe-cpu-pipeline against fusedMoeFp8; bit for bit, as
/// both round in the same order. With `staticInputs`, static activation
/// scales that saturate the largest values.
void checkFusedMoeFp8(const reference::Fp8Scheme &scheme, ElementType type,
                      bool staticInputs = false) {
  const int64_t t = 9, h = 200, intermediate = 72, e = 16;
  reference::Router router = deepseekRouter();
  router.topK = 4;
  router.numGroups = 4;
  router.topkGroups = 2;
  std::mt19937 generator(22);
  HostTensor hidden =
      HostTensor::fromFloats(type, {t, h}, uniform(generator, t * h, 2.0f));
  std::vector<float> logits = uniform(generator, t * e, 3.0f);
  std::vector<float> bias = uniform(generator, e, 0.5f);
  Fp8Experts experts(generator, scheme, e + 1, h, intermediate);
  std::vector<HostTensor> inputs = {
      hidden,
      HostTensor::fromFloats(ElementType::F32, {t, e}, logits),
      experts.w13,
      experts.w2,
      HostTensor::fromFloats(ElementType::F32, {e}, bias),
      experts.w13Scales,
      experts.w2Scales};
  std::optional<reference::StaticInputScales> inputScales;
  std::string inputScalesText;
  if (staticInputs) {
    std::vector<float> slotWeights(t * router.numSlots());
    std::vector<int32_t> ids(t * router.numSlots());
    reference::gate(router, t, e, logits.data(), bias.data(),
                    slotWeights.data(), ids.data());
    inputScales = saturatingInputScales(
        scheme, reference::Activation::SiluAndMul, hidden, ids, experts);
    inputScalesText = appendInputScales(*inputScales, inputs);
  }
  std::vector<float> output = runLayer(
      inputs, 2,
      llvm::formatv("moe.fused_moe %a0, %a1, %a2, %a3 bias(%a4) scales(%a5, "
                    "%a6){0} activation(silu_and_mul) {{router = {1}, "
                    "quantization = {2}}",
                    inputScalesText, routerText(router),
                    quantizationText(scheme, staticInputs)));

  std::vector<float> expected(t * h);
  std::vector<float> hiddenValues = hidden.toFloats(),
                     w13Scales = experts.w13Scales.toFloats(),
                     w2Scales = experts.w2Scales.toFloats();
  reference::fusedMoeFp8(
      router, scheme, reference::Activation::SiluAndMul, t, h, e, intermediate,
      hiddenValues.data(), logits.data(), bias.data(), experts.w13.bytes.data(),
      w13Scales.data(), experts.w2.bytes.data(), w2Scales.data(),
      inputScales ? &*inputScales : nullptr, expected.data(),
      [&](float value) { return roundTo(type, value); });
  expectSameBits(output, expected);
}

/// The experts of an fp8 layer given routing, ids out of range (-1, E) and
/// an expert named twice by one token, against fusedExpertsFp8 bit for bit;
/// with `staticInputs`, static activation scales that saturate the largest
/// values.
void checkFusedExpertsFp8(const reference::Fp8Scheme &scheme, ElementType type,
                          bool staticInputs = false) {
  const int64_t t = 9, s = 3, h = 200, intermediate = 72, e = 8;
  std::mt19937 generator(23);
  HostTensor hidden =
      HostTensor::fromFloats(type, {t, h}, uniform(generator, t * h, 2.0f));
  std::vector<int32_t> ids = givenIds(generator, t, s, e);
  std::vector<float> weights = uniform(generator, t * s, 1.0f);
  Fp8Experts experts(generator, scheme, e, h, intermediate);
  std::vector<HostTensor> inputs = {
      hidden,
      HostTensor::fromInts({t, s}, ids),
      HostTensor::fromFloats(ElementType::F32, {t, s}, weights),
      experts.w13,
      experts.w2,
      experts.w13Scales,
      experts.w2Scales};
  std::optional<reference::StaticInputScales> inputScales;
  std::string inputScalesText;
  if (staticInputs) {
    inputScales = saturatingInputScales(
        scheme, reference::Activation::GeluAndMul, hidden, ids, experts);
    inputScalesText = appendInputScales(*inputScales, inputs);
  }
  std::vector<float> output = runLayer(
      inputs, 3,
      llvm::formatv("moe.fused_experts %a0, %a1, %a2, %a3, %a4 scales(%a5, "
                    "%a6){0} activation(gelu_and_mul) {{quantization = {1}}",
                    inputScalesText, quantizationText(scheme, staticInputs)));

  std::vector<float> expected(t * h);
  std::vector<float> hiddenValues = hidden.toFloats(),
                     w13Scales = experts.w13Scales.toFloats(),
                     w2Scales = experts.w2Scales.toFloats();
  reference::fusedExpertsFp8(
      scheme, reference::Activation::GeluAndMul, t, h, e, intermediate, s,
      hiddenValues.data(), ids.data(), weights.data(), experts.w13.bytes.data(),
      w13Scales.data(), experts.w2.bytes.data(), w2Scales.data(),
      inputScales ? &*inputScales : nullptr, expected.data(),
      [&](float value) { return roundTo(type, value); });
  expectSameBits(output, expected);
}

TEST(FusedMoeFp8, BlockScalesAsDeepSeekV3BitExact) {
  for (ElementType type : {ElementType::BF16, ElementType::F32}) {
    SCOPED_TRACE(name(type));
    checkFusedMoeFp8({reference::Fp8Scaling::Block, 128}, type);
  }
}

TEST(FusedExpertsFp8, EverySchemeBitExact) {
  using reference::Fp8Scaling;
  for (reference::Fp8Scheme scheme :
       {reference::Fp8Scheme{Fp8Scaling::Block, 128},
        reference::Fp8Scheme{Fp8Scaling::Block, 32},
        reference::Fp8Scheme{Fp8Scaling::Channel, 128},
        reference::Fp8Scheme{Fp8Scaling::Tensor, 128}}) {
    for (ElementType type : {ElementType::BF16, ElementType::F32}) {
      SCOPED_TRACE(quantizationText(scheme) + " " + name(type));
      checkFusedExpertsFp8(scheme, type);
    }
  }
}

TEST(FusedExpertsFp8, StaticInputScalesBitExact) {
  using reference::Fp8Scaling;
  for (reference::Fp8Scheme scheme :
       {reference::Fp8Scheme{Fp8Scaling::Channel, 128},
        reference::Fp8Scheme{Fp8Scaling::Tensor, 128}}) {
    for (ElementType type : {ElementType::BF16, ElementType::F32}) {
      SCOPED_TRACE(quantizationText(scheme, true) + " " + name(type));
      checkFusedExpertsFp8(scheme, type, /*staticInputs=*/true);
    }
  }
}

TEST(FusedMoeFp8, StaticInputScalesBitExact) {
  checkFusedMoeFp8({reference::Fp8Scaling::Tensor, 128}, ElementType::BF16,
                   /*staticInputs=*/true);
}

//===----------------------------------------------------------------------===//
// gpt-oss: expert biases and the clamped SwiGLU through whole layers
//===----------------------------------------------------------------------===//

/// A gpt-oss-like layer (top-4 of 8 experts, softmax then renormalized,
/// expert biases of `biasType`, the clamped SwiGLU) in `type` through
/// moe-cpu-pipeline against the reference's fusedMoe; or, with
/// `givenRouting`, its experts (moe.fused_experts) on ids with some out of
/// range against fusedExperts.
void checkGptOssLayer(ElementType type, ElementType biasType,
                      bool givenRouting) {
  const int64_t t = 9, h = 64, intermediate = 48, e = 8;
  reference::Router router = softmaxTopK(4, /*renormalize=*/true);
  int64_t s = router.numSlots();
  std::mt19937 generator(24);
  HostTensor hidden =
      HostTensor::fromFloats(type, {t, h}, uniform(generator, t * h, 1.0f));
  HostTensor w13 = HostTensor::fromFloats(
      type, {e, 2 * intermediate, h},
      uniform(generator, e * 2 * intermediate * h, 0.3f));
  HostTensor w2 =
      HostTensor::fromFloats(type, {e, h, intermediate},
                             uniform(generator, e * h * intermediate, 0.3f));
  HostTensor w13Bias =
      HostTensor::fromFloats(biasType, {e, 2 * intermediate},
                             uniform(generator, e * 2 * intermediate, 1.0f));
  HostTensor w2Bias =
      HostTensor::fromFloats(biasType, {e, h}, uniform(generator, e * h, 1.0f));
  std::vector<float> logits = uniform(generator, t * e, 3.0f);
  std::vector<int32_t> ids = givenIds(generator, t, s, e);
  std::vector<float> weights = uniform(generator, t * s, 1.0f);

  std::vector<HostTensor> inputs = {hidden};
  std::string op;
  std::string attributes = llvm::formatv("swiglu = {0}", kSwiglu);
  if (givenRouting) {
    inputs.push_back(HostTensor::fromInts({t, s}, ids));
    inputs.push_back(HostTensor::fromFloats(ElementType::F32, {t, s}, weights));
    op = "moe.fused_experts %a0, %a1, %a2, %a3, %a4 biases(%a5, %a6) "
         "activation(clamped_swiglu) {" +
         attributes + "}";
  } else {
    inputs.push_back(HostTensor::fromFloats(ElementType::F32, {t, e}, logits));
    op = "moe.fused_moe %a0, %a1, %a2, %a3 biases(%a4, %a5) "
         "activation(clamped_swiglu) {router = " +
         routerText(router) + ", " + attributes + "}";
  }
  for (const HostTensor &tensor : {w13, w2, w13Bias, w2Bias})
    inputs.push_back(tensor);
  std::vector<float> output = runLayer(inputs, givenRouting ? 3 : 2, op);

  std::vector<float> expected(t * h);
  std::vector<float> x = hidden.toFloats(), w13Values = w13.toFloats(),
                     w2Values = w2.toFloats(), b13 = w13Bias.toFloats(),
                     b2 = w2Bias.toFloats();
  auto round = [&](float value) { return roundTo(type, value); };
  reference::GatedActivation activation =
      reference::GatedActivation::clampedSwiglu(kSwigluAlpha, kSwigluLimit);
  if (givenRouting)
    reference::fusedExperts(activation, t, h, e, intermediate, s, x.data(),
                            ids.data(), weights.data(), w13Values.data(),
                            w2Values.data(), expected.data(), round,
                            {b13.data(), b2.data()});
  else
    reference::fusedMoe(router, activation, t, h, e, intermediate, x.data(),
                        logits.data(), /*bias=*/nullptr, w13Values.data(),
                        w2Values.data(), expected.data(), round,
                        {b13.data(), b2.data()});
  expectClose(output, expected, tolerance(type));
}

TEST(GptOss, FusedMoeWithBiasesAndClampedSwiglu) {
  for (ElementType type :
       {ElementType::F32, ElementType::BF16, ElementType::F16}) {
    SCOPED_TRACE(name(type));
    checkGptOssLayer(type, type, /*givenRouting=*/false);
  }
}

TEST(GptOss, FusedExpertsWithF32BiasesAndOutOfRangeIds) {
  for (ElementType type : {ElementType::F32, ElementType::BF16}) {
    SCOPED_TRACE(name(type));
    checkGptOssLayer(type, ElementType::F32, /*givenRouting=*/true);
  }
}

//===----------------------------------------------------------------------===//
// CpuFunction's own checks
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// MXFP4 weights
//===----------------------------------------------------------------------===//

const char *kMxfp4Quantization =
    "#moe.quantization<weights = mxfp4, activations = none, block_size = 32>";

/// Packed codes [rows, k/2] cycling through every byte, so that each e2m1
/// code (+-0, the subnormal +-0.5, +-6) sits in both nibbles.
std::vector<uint8_t> everyByte(int64_t rows, int64_t k) {
  std::vector<uint8_t> codes(rows * k / 2);
  for (size_t i = 0; i < codes.size(); ++i)
    codes[i] = static_cast<uint8_t>(i * 7 + i / 256);
  return codes;
}

/// A grouped matmul over one-hot rows reads back every weight it decodes:
/// output[r][n] = w[n][r], for every code and scales from 2^-127 (the
/// subnormal code 0) to 2^125 (the largest that keeps 6 x scale finite),
/// and NaN for the scale 0xFF.
TEST(GroupedMatmul, Mxfp4DecodesEveryCodeAndScale) {
  const int64_t k = 64, n = 16, capacity = k + 63;
  const std::vector<uint8_t> exponents = {0, 1, 100, 126, 127, 128, 200, 252};
  std::vector<uint8_t> codes = everyByte(n, k), scales(n * 2);
  for (size_t i = 0; i < scales.size(); ++i)
    scales[i] = exponents[i % exponents.size()];
  scales.back() = 0xFF;
  std::vector<float> rows(capacity * k, 0.0f);
  for (int64_t r = 0; r < k; ++r)
    rows[r * k + r] = 1.0f;
  std::vector<int32_t> sorted(capacity, k);
  for (int64_t r = 0; r < k; ++r)
    sorted[r] = r;
  std::vector<HostTensor> inputs = {
      HostTensor::fromFloats(ElementType::F32, {capacity, k}, rows),
      HostTensor::fromCodes(ElementType::I8, {1, n, k / 2}, codes),
      HostTensor::fromInts({capacity}, sorted),
      HostTensor::fromInts({2}, {0, -1}),
      HostTensor::fromInts({}, {static_cast<int32_t>(k)}),
      HostTensor::fromCodes(ElementType::F8E8M0FNU, {1, n, 2}, scales)};
  std::string op = llvm::formatv(
      "moe.grouped_matmul %a0, %a1, %a2, %a3, %a4 weight_scales(%a5) "
      "input(sorted) output(sorted) {{block_m = 64, num_slots = 1, "
      "quantization = {0}}",
      kMxfp4Quantization);
  std::unique_ptr<CpuFunction> function = compile(layerFunction(
      inputs, 0, op, llvm::formatv("tensor<{0}x{1}xf32>", capacity, n)));
  ASSERT_TRUE(function);
  std::vector<HostTensor> outputs = run(*function, inputs);
  ASSERT_EQ(outputs.size(), 1u);
  std::vector<float> output = outputs[0].toFloats();
  std::vector<float> weights =
      reference::decodeMxfp4(n, k, codes.data(), scales.data());
  for (int64_t row = 0; row < n; ++row) {
    // A NaN weight makes every sum over its row NaN (0 x NaN).
    bool nanRow =
        std::any_of(weights.begin() + row * k, weights.begin() + (row + 1) * k,
                    [](float value) { return std::isnan(value); });
    for (int64_t column = 0; column < k; ++column) {
      float expected = weights[row * k + column];
      float actual = output[column * n + row];
      if (nanRow)
        EXPECT_TRUE(std::isnan(actual)) << "w[" << row << "][" << column << "]";
      else
        // One-hot sums add +0 to a decoded -0.
        EXPECT_EQ(actual, expected) << "w[" << row << "][" << column << "]";
    }
  }
  EXPECT_TRUE(std::isnan(output[n - 1]));
}

/// MXFP4 experts given routing (ids out of range, an expert named twice)
/// against the fp32 reference experts on the decoded weights, bit for bit:
/// the decoding is exact and both sum in K order.
TEST(FusedExperts, Mxfp4BitExact) {
  const int64_t t = 9, s = 3, h = 64, intermediate = 96, e = 4;
  std::mt19937 generator(24);
  for (ElementType type : {ElementType::BF16, ElementType::F32}) {
    SCOPED_TRACE(name(type));
    HostTensor hidden =
        HostTensor::fromFloats(type, {t, h}, uniform(generator, t * h, 2.0f));
    std::uniform_int_distribution<int> exponent(120, 125);
    std::vector<int32_t> ids = givenIds(generator, t, s, e);
    std::vector<float> weights = uniform(generator, t * s, 1.0f);
    auto randomScales = [&](int64_t count) {
      std::vector<uint8_t> scales(count);
      for (uint8_t &scale : scales)
        scale = static_cast<uint8_t>(exponent(generator));
      return scales;
    };
    std::vector<uint8_t> w13 = everyByte(e * 2 * intermediate, h),
                         w2 = everyByte(e * h, intermediate);
    std::vector<uint8_t> w13Scales =
                             randomScales(e * 2 * intermediate * h / 32),
                         w2Scales = randomScales(e * h * intermediate / 32);
    std::vector<HostTensor> inputs = {
        hidden,
        HostTensor::fromInts({t, s}, ids),
        HostTensor::fromFloats(ElementType::F32, {t, s}, weights),
        HostTensor::fromCodes(ElementType::I8, {e, 2 * intermediate, h / 2},
                              w13),
        HostTensor::fromCodes(ElementType::I8, {e, h, intermediate / 2}, w2),
        HostTensor::fromCodes(ElementType::F8E8M0FNU,
                              {e, 2 * intermediate, h / 32}, w13Scales),
        HostTensor::fromCodes(ElementType::F8E8M0FNU, {e, h, intermediate / 32},
                              w2Scales)};
    std::vector<float> output = runLayer(
        inputs, 3,
        llvm::formatv("moe.fused_experts %a0, %a1, %a2, %a3, %a4 scales(%a5, "
                      "%a6) activation(silu_and_mul) {{quantization = {0}}",
                      kMxfp4Quantization));
    std::vector<float> expected(t * h), hiddenValues = hidden.toFloats();
    std::vector<float> w13Values = reference::decodeMxfp4(
        e * 2 * intermediate, h, w13.data(), w13Scales.data());
    std::vector<float> w2Values =
        reference::decodeMxfp4(e * h, intermediate, w2.data(), w2Scales.data());
    reference::fusedExperts(reference::Activation::SiluAndMul, t, h, e,
                            intermediate, s, hiddenValues.data(), ids.data(),
                            weights.data(), w13Values.data(), w2Values.data(),
                            expected.data(),
                            [&](float value) { return roundTo(type, value); });
    expectSameBits(output, expected);
  }
}

//===----------------------------------------------------------------------===//
// Expert parallel: moe-expert-parallel's phases, the ranks in one process
//===----------------------------------------------------------------------===//

/// The layer of the expert-parallel tests: T tokens per rank, E routed
/// experts (rank 0 of any world up to 8 holds at least top_k of them) and
/// a shared one, softmax top-4 with a correction bias, expert biases.
struct EpLayer {
  static constexpr int64_t t = 6, h = 32, intermediate = 16, e = 32, x = 1;
  ElementType type;

  reference::Router router() const {
    reference::Router router = softmaxTopK(4, /*renormalize=*/true);
    router.numSharedExperts = x;
    return router;
  }
  int64_t slots() const { return router().numSlots(); }

  /// Random weights of all E + X experts ({w13, w2, w13_bias, w2_bias}) and
  /// a random correction bias.
  std::pair<std::vector<HostTensor>, HostTensor>
  randomWeights(std::mt19937 &generator) const {
    const int64_t stored = e + x;
    std::vector<HostTensor> weights = {
        HostTensor::fromFloats(
            type, {stored, 2 * intermediate, h},
            uniform(generator, stored * 2 * intermediate * h, 0.3f)),
        HostTensor::fromFloats(
            type, {stored, h, intermediate},
            uniform(generator, stored * h * intermediate, 0.3f)),
        HostTensor::fromFloats(
            type, {stored, 2 * intermediate},
            uniform(generator, stored * 2 * intermediate, 0.5f)),
        HostTensor::fromFloats(type, {stored, h},
                               uniform(generator, stored * h, 0.5f))};
    return {std::move(weights),
            HostTensor::fromFloats(ElementType::F32, {e},
                                   uniform(generator, e, 0.5f))};
  }

  /// The layer's function on `weights` ({w13, w2, w13_bias, w2_bias}),
  /// rank `rank` of `world` when `world` is given.
  std::string source(const std::vector<HostTensor> &weights,
                     std::optional<std::pair<int64_t, int64_t>> world) const {
    std::vector<HostTensor> inputs = {HostTensor(type, {t, h}),
                                      HostTensor(ElementType::F32, {t, e}),
                                      weights[0],
                                      weights[1],
                                      HostTensor(ElementType::F32, {e}),
                                      weights[2],
                                      weights[3]};
    std::string parallel =
        world ? llvm::formatv(", expert_parallel = #moe.expert_parallel<world "
                              "= {0}, rank = {1}>",
                              world->first, world->second)
                    .str()
              : "";
    return layerFunction(
        inputs, /*perToken=*/0,
        llvm::formatv("moe.fused_moe %a0, %a1, %a2, %a3 bias(%a4) biases(%a5, "
                      "%a6) activation(silu_and_mul) {{router = {0}{1}}",
                      routerText(router()), parallel),
        llvm::formatv("tensor<{0}x{1}x{2}>", t, h, name(type)));
  }
};

/// Experts [first, first + count) and the shared ones of `full`, [E+X, ...]:
/// a rank's local experts.
HostTensor localExperts(const HostTensor &full, int64_t first, int64_t count) {
  int64_t bytes = full.bytes.size() / full.shape[0];
  std::vector<int64_t> shape = full.shape;
  shape[0] = count + EpLayer::x;
  HostTensor local(full.type, shape);
  auto copy = [&](int64_t from, int64_t to, int64_t experts) {
    std::memcpy(local.bytes.data() + to * bytes,
                full.bytes.data() + from * bytes, experts * bytes);
  };
  copy(first, 0, count);
  copy(EpLayer::e, count, EpLayer::x);
  return local;
}

/// One rank's phases of the expert-parallel layer, compiled.
struct RankPhases {
  std::unique_ptr<CpuFunction> dispatch, experts, combine;
};

/// Splits `source` by moe-expert-parallel, routing the experts phase in
/// blocks of `blockM` rows, and compiles its three phases.
std::optional<RankPhases> compilePhases(const std::string &source,
                                        int64_t blockM) {
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, &sharedContext());
  PassManager pm(&sharedContext());
  pm.addPass(createMoeExpertParallel(MoeExpertParallelOptions{blockM}));
  if (!module || failed(pm.run(*module))) {
    ADD_FAILURE() << "does not split:\n" << source;
    return std::nullopt;
  }
  RankPhases phases;
  for (auto [function, entry] : {std::pair{&phases.dispatch, "layer_dispatch"},
                                 {&phases.experts, "layer_experts"},
                                 {&phases.combine, "layer_combine"}}) {
    // Each phase alone: compile lowers the whole module.
    OwningOpRef<ModuleOp> phase = module->clone();
    for (func::FuncOp other :
         llvm::make_early_inc_range(phase->getOps<func::FuncOp>()))
      if (other.getSymName() != entry)
        other.erase();
    auto compiled = CpuFunction::compile(*phase, entry);
    if (!compiled) {
      ADD_FAILURE() << llvm::toString(compiled.takeError());
      return std::nullopt;
    }
    *function = std::move(*compiled);
  }
  return phases;
}

/// One rank's inputs: its tokens' hidden states and logits.
struct RankTokens {
  HostTensor hidden, logits;
};

/// W ranks of the layer in one process: each rank's phases and weights,
/// the exchange buffers of all ranks (on GPUs, the peers' symmetric
/// memory), stale from the start as no call clears them (NaN rows, weights
/// and returned rows, out-of-range slots, garbage counts), the completion
/// flags of either exchange, zeroed once, and each rank's status.
class SimulatedRanks {
public:
  SimulatedRanks(const EpLayer &layer, int64_t world, int64_t blockM,
                 const std::vector<HostTensor> &weights, HostTensor bias)
      : world(world), bias(std::move(bias)) {
    int64_t perRank = EpLayer::e / world, local = perRank + EpLayer::x;
    int64_t rows = local * world * EpLayer::t;
    float nan = std::numeric_limits<float>::quiet_NaN();
    buffers = {
        HostTensor::fromFloats(
            layer.type, {world, rows, EpLayer::h},
            std::vector<float>(rows * world * EpLayer::h, nan)),
        HostTensor::fromFloats(ElementType::F32, {world, rows},
                               std::vector<float>(world * rows, nan)),
        HostTensor::fromInts({world, rows},
                             std::vector<int32_t>(world * rows, -7)),
        HostTensor::fromInts({world, local, world},
                             std::vector<int32_t>(world * local * world, 99))};
    int64_t returned = world * EpLayer::t * layer.slots() * EpLayer::h;
    this->returned = HostTensor::fromFloats(
        layer.type, {world, EpLayer::t, layer.slots(), EpLayer::h},
        std::vector<float>(returned, nan));
    dispatchFlags = combineFlags = HostTensor::fromInts(
        {world, world}, std::vector<int32_t>(world * world));
    statuses.assign(world, HostTensor::fromInts({2}, {0, 0}));
    for (int64_t rank = 0; rank < world; ++rank) {
      std::vector<HostTensor> mine;
      for (const HostTensor &full : weights)
        mine.push_back(localExperts(full, rank * perRank, perRank));
      std::optional<RankPhases> compiled =
          compilePhases(layer.source(mine, std::pair{world, rank}), blockM);
      if (!compiled)
        return;
      phases.push_back(std::move(*compiled));
      localWeights.push_back(std::move(mine));
    }
  }

  bool compiled() const { return static_cast<int64_t>(phases.size()) == world; }

  /// Each phase for ranks 0 .. W-1 in turn on the shared buffers; returns
  /// every rank's output.
  std::vector<std::vector<float>> call(const std::vector<RankTokens> &tokens) {
    for (int64_t rank = 0; rank < world; ++rank)
      if (!dispatch(rank, tokens[rank]))
        return {};
    for (int64_t rank = 0; rank < world; ++rank)
      if (!experts(rank))
        return {};
    std::vector<std::vector<float>> results;
    for (int64_t rank = 0; rank < world; ++rank) {
      std::optional<std::vector<float>> output = combine(rank);
      if (!output)
        return {};
      results.push_back(std::move(*output));
    }
    return results;
  }

  /// Rank `rank`'s dispatch of `tokens`; false when it failed to run.
  bool dispatch(int64_t rank, const RankTokens &tokens) {
    std::vector<HostTensor> inputs = {tokens.hidden, tokens.logits, bias};
    inputs.insert(inputs.end(), buffers.begin(), buffers.end());
    inputs.push_back(dispatchFlags);
    std::vector<HostTensor> outputs = run(*phases[rank].dispatch, inputs);
    if (outputs.size() != 5)
      return false;
    dispatchFlags = outputs.back();
    outputs.pop_back();
    buffers = std::move(outputs);
    return true;
  }

  /// Rank `rank`'s experts phase; false when it failed to run.
  bool experts(int64_t rank) {
    std::vector<HostTensor> inputs = localWeights[rank];
    inputs.insert(inputs.end(), buffers.begin(), buffers.end());
    inputs.insert(inputs.end(),
                  {returned, dispatchFlags, combineFlags, statuses[rank]});
    std::vector<HostTensor> outputs = run(*phases[rank].experts, inputs);
    if (outputs.size() != 3)
      return false;
    returned = outputs[0];
    combineFlags = outputs[1];
    statuses[rank] = outputs[2];
    return true;
  }

  /// Rank `rank`'s combine phase: its output, none when it failed to run.
  std::optional<std::vector<float>> combine(int64_t rank) {
    std::vector<HostTensor> outputs =
        run(*phases[rank].combine, {returned, combineFlags, statuses[rank]});
    if (outputs.size() != 2)
      return std::nullopt;
    statuses[rank] = outputs[1];
    return outputs[0].toFloats();
  }

  /// Rank `rank`'s status: [phase, missing source + 1] of its first wait
  /// that gave up, [0, 0] if none did.
  std::vector<int32_t> status(int64_t rank) const {
    return statuses[rank].toInts();
  }
  /// The dispatch's and the combine's flags, [W, W] each.
  std::pair<std::vector<int32_t>, std::vector<int32_t>> flags() const {
    return {dispatchFlags.toInts(), combineFlags.toInts()};
  }

private:
  int64_t world;
  HostTensor bias;
  std::vector<RankPhases> phases;
  std::vector<std::vector<HostTensor>> localWeights;
  std::vector<HostTensor> buffers;
  HostTensor returned, dispatchFlags, combineFlags;
  std::vector<HostTensor> statuses;
};

/// Random tokens of `ranks` ranks; with `skewed`, logits that send every
/// token's top_k to experts 0 .. 3, all on rank 0, filling its regions.
std::vector<RankTokens> epTokens(std::mt19937 &generator, const EpLayer &layer,
                                 int64_t ranks, bool skewed) {
  std::vector<RankTokens> tokens;
  for (int64_t rank = 0; rank < ranks; ++rank) {
    std::vector<float> logits =
        uniform(generator, EpLayer::t * EpLayer::e, 3.0f);
    if (skewed)
      for (int64_t t = 0; t < EpLayer::t; ++t)
        for (int64_t e = 0; e < 4; ++e)
          logits[t * EpLayer::e + e] += 20.0f;
    tokens.push_back({HostTensor::fromFloats(
                          layer.type, {EpLayer::t, EpLayer::h},
                          uniform(generator, EpLayer::t * EpLayer::h, 2.0f)),
                      HostTensor::fromFloats(
                          ElementType::F32, {EpLayer::t, EpLayer::e}, logits)});
  }
  return tokens;
}

// For W = 1, 2, 4, 8 ranks, each rank's phases (gate and dispatch, local
// experts, combine) run in turn in one process equal the single-device
// layer on the same weights bit for bit, on random routing and then, on the
// same uncleared buffers, with every token sent to rank 0's experts; the
// experts phase routed in blocks of 1 row and of 16 (the GPU GEMMs' least).
TEST(ExpertParallel, EveryWorldEqualsTheSingleDeviceLayerBitForBit) {
  for (ElementType type : {ElementType::BF16, ElementType::F32}) {
    SCOPED_TRACE(name(type));
    EpLayer layer{type};
    std::mt19937 generator(19);
    auto [weights, bias] = layer.randomWeights(generator);
    std::unique_ptr<CpuFunction> single =
        compile(layer.source(weights, std::nullopt));
    ASSERT_TRUE(single);
    for (auto [world, blockM] : {std::pair<int64_t, int64_t>{1, 1},
                                 {2, 1},
                                 {4, 1},
                                 {8, 1},
                                 {1, 16},
                                 {2, 16},
                                 {4, 16},
                                 {8, 16}}) {
      SCOPED_TRACE(
          llvm::formatv("world = {0}, block_m = {1}", world, blockM).str());
      SimulatedRanks ranks(layer, world, blockM, weights, bias);
      ASSERT_TRUE(ranks.compiled());
      for (bool skewed : {false, true}) {
        SCOPED_TRACE(skewed ? "skewed" : "random");
        std::vector<RankTokens> tokens =
            epTokens(generator, layer, world, skewed);
        std::vector<std::vector<float>> outputs = ranks.call(tokens);
        ASSERT_EQ(static_cast<int64_t>(outputs.size()), world);
        for (int64_t rank = 0; rank < world; ++rank) {
          std::vector<HostTensor> expected = run(
              *single, {tokens[rank].hidden, tokens[rank].logits, weights[0],
                        weights[1], bias, weights[2], weights[3]});
          ASSERT_EQ(expected.size(), 1u);
          std::vector<float> values = expected[0].toFloats();
          ASSERT_TRUE(std::none_of(values.begin(), values.end(),
                                   [](float v) { return std::isnan(v); }));
          SCOPED_TRACE(llvm::formatv("rank {0}", rank).str());
          expectSameBits(outputs[rank], values);
          EXPECT_EQ(ranks.status(rank), (std::vector<int32_t>{0, 0}));
        }
      }
      // Two calls: every rank signalled every rank twice in either
      // exchange, and nothing cleared the counters.
      std::vector<int32_t> twice(world * world, 2);
      EXPECT_EQ(ranks.flags(), std::pair(twice, twice));
    }
  }
}

// A rank whose experts phase runs before a peer's dispatch records phase 1
// and the peer (+ 1) in its status, and keeps that first failure when its
// combine phase then runs before the peer's experts phase; a rank whose
// combine phase runs before a peer's experts phase records phase 2. The
// others, whose peers all signalled, record nothing.
TEST(ExpertParallel, AWaitForAPeerBehindRecordsThePhaseAndThePeer) {
  EpLayer layer{ElementType::F32};
  std::mt19937 generator(7);
  auto [weights, bias] = layer.randomWeights(generator);
  constexpr int64_t kWorld = 4;
  SimulatedRanks ranks(layer, kWorld, /*blockM=*/1, weights, bias);
  ASSERT_TRUE(ranks.compiled());
  std::vector<RankTokens> tokens = epTokens(generator, layer, kWorld, false);
  // Rank 2 dispatches last: rank 0's experts phase runs before it.
  for (int64_t rank : {0, 1, 3})
    ASSERT_TRUE(ranks.dispatch(rank, tokens[rank]));
  ASSERT_TRUE(ranks.experts(0));
  EXPECT_EQ(ranks.status(0), (std::vector<int32_t>{1, 3}));
  ASSERT_TRUE(ranks.dispatch(2, tokens[2]));
  // Rank 3's experts phase runs last: the combine phases of ranks 0 and 1
  // run before it.
  for (int64_t rank : {1, 2})
    ASSERT_TRUE(ranks.experts(rank));
  ASSERT_TRUE(ranks.combine(0));
  ASSERT_TRUE(ranks.combine(1));
  ASSERT_TRUE(ranks.experts(3));
  ASSERT_TRUE(ranks.combine(2));
  ASSERT_TRUE(ranks.combine(3));
  EXPECT_EQ(ranks.status(0), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(ranks.status(1), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(ranks.status(2), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(ranks.status(3), (std::vector<int32_t>{0, 0}));
  // Every signal was sent, late or not: the counters are in step.
  std::vector<int32_t> once(kWorld * kWorld, 1);
  EXPECT_EQ(ranks.flags(), std::pair(once, once));
}

/// moe.ep_route of `counts` [2, 2] (L = W = 2) over regions of C = 4 rows
/// in blocks of `blockM`.
std::vector<std::vector<int32_t>>
runEpRoute(int64_t blockM, const std::vector<int32_t> &counts) {
  int64_t positions = 16 + 2 * (blockM - 1);
  int64_t blocks = (positions + blockM - 1) / blockM;
  std::string results =
      llvm::formatv("tensor<{0}xi32>, tensor<{1}xi32>, tensor<i32>", positions,
                    blocks)
          .str();
  std::unique_ptr<CpuFunction> function = compile(
      llvm::formatv("func.func @route(%c: tensor<2x2xi32>) -> ({0}) {{\n"
                    "  %s, %e, %n = moe.ep_route %c {{block_m = {1}} : "
                    "(tensor<2x2xi32>) -> ({0})\n"
                    "  return %s, %e, %n : {0}\n}\n",
                    results, blockM));
  if (!function)
    return {};
  std::vector<HostTensor> outputs =
      run(*function, {HostTensor::fromInts({2, 2}, counts)});
  std::vector<std::vector<int32_t>> values;
  for (const HostTensor &output : outputs)
    values.push_back(output.toInts());
  return values;
}

// moe.ep_route lists each local expert's current rows, region after
// region, padded with the sentinel 16 to whole blocks, the experts of the
// blocks, -1 and the sentinel past them; counts outside [0, C] read as
// clamped (the op's example, then stale counts).
TEST(ExpertParallel, EpRouteCompactsEachExpertsRowsIntoBlocks) {
  constexpr int32_t kSentinel = 16;
  std::vector<int32_t> sorted = {0,         1,         2,         4, 5,
                                 kSentinel, kSentinel, kSentinel, 12};
  sorted.resize(22, kSentinel);
  EXPECT_EQ(
      runEpRoute(4, {3, 2, 0, 1}),
      (std::vector<std::vector<int32_t>>{sorted, {0, 0, 1, -1, -1, -1}, {12}}));
  sorted = {0, 1, 2, 4, 5, 12};
  sorted.resize(16, kSentinel);
  std::vector<int32_t> experts = {0, 0, 0, 0, 0, 1};
  experts.resize(16, -1);
  EXPECT_EQ(runEpRoute(1, {3, 2, 0, 1}),
            (std::vector<std::vector<int32_t>>{sorted, experts, {6}}));
  // Expert 0 gets no row and no block; region (1, 0) its C = 4 rows.
  sorted = {8, 9, 10, 11, 12};
  sorted.resize(22, kSentinel);
  EXPECT_EQ(
      runEpRoute(4, {-5, 0, 99, 1}),
      (std::vector<std::vector<int32_t>>{sorted, {1, 1, -1, -1, -1, -1}, {8}}));
}

TEST(CpuFunction, RejectsWrongInputs) {
  std::unique_ptr<CpuFunction> function = compile(
      "func.func @combine(%r: tensor<?x2x4xf32>, %w: tensor<?x2xf32>) -> "
      "tensor<?x4xf32> {\n  %y = moe.combine %r weights(%w) : "
      "(tensor<?x2x4xf32>, tensor<?x2xf32>) -> tensor<?x4xf32>\n"
      "  return %y : tensor<?x4xf32>\n}\n");
  ASSERT_TRUE(function);
  auto expectError = [&](std::vector<HostTensor> inputs,
                         llvm::StringRef message) {
    auto outputs = function->run(inputs);
    ASSERT_FALSE(outputs) << "accepted inputs that should fail: "
                          << message.str();
    std::string text = llvm::toString(outputs.takeError());
    EXPECT_NE(text.find(message.str()), std::string::npos) << text;
  };
  HostTensor rows(ElementType::F32, {3, 2, 4});
  HostTensor weights(ElementType::F32, {3, 2});
  expectError({rows}, "takes 2 arguments, got 1");
  expectError({HostTensor(ElementType::BF16, {3, 2, 4}), weights},
              "expected element type f32");
  expectError({HostTensor(ElementType::F32, {3, 8}), weights},
              "expected rank 3");
  expectError({HostTensor(ElementType::F32, {3, 2, 5}), weights},
              "dimension 2 must be 4");
  expectError({rows, HostTensor(ElementType::F32, {4, 2})},
              "must equal the other dynamic sizes (3)");
}

} // namespace
