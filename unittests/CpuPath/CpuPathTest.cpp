//===- CpuPathTest.cpp - The CPU path against the plain C++ reference -----===//
//
// Each test compiles one primitive moe op through moe-cpu-pipeline, runs it
// with mlir::ExecutionEngine on seeded data (or on the corner case it pins
// down) and compares the result with the independent reference in
// lib/Reference: ids and routing exactly, values to a stated tolerance.
//
//===----------------------------------------------------------------------===//

#include "moe/CpuJit/CpuFunction.h"
#include "moe/Reference/Reference.h"
#include "moe/Registration/Registration.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"

#include "gtest/gtest.h"

#include <cmath>
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
  const char *activation; // none, silu_and_mul, gelu_and_mul
  bool tokenInput, sortedOutput, routedWeights;
};

reference::Activation toReference(llvm::StringRef activation) {
  if (activation == "silu_and_mul")
    return reference::Activation::SiluAndMul;
  if (activation == "gelu_and_mul")
    return reference::Activation::GeluAndMul;
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

void checkGroupedMatmul(const GemmCase &gemm) {
  const int64_t t = 7, s = 3, e = 5, blockM = 4, n = 24, k = 40;
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

  HostTensor input = HostTensor::fromFloats(gemm.type, {rows, k},
                                            uniform(generator, rows * k, 1.0f));
  HostTensor weights = HostTensor::fromFloats(
      gemm.type, {e, n, k}, uniform(generator, e * n * k, 0.2f));
  HostTensor routedWeights = HostTensor::fromFloats(
      ElementType::F32, {t, s}, uniform(generator, t * s, 1.0f));

  std::string elt = name(gemm.type);
  std::string inputType = llvm::formatv("tensor<{0}x{1}x{2}>", rows, k, elt);
  std::string weightsType =
      llvm::formatv("tensor<{0}x{1}x{2}x{3}>", e, n, k, elt);
  std::string outputType =
      gemm.sortedOutput
          ? llvm::formatv("tensor<{0}x{1}x{2}>", capacity, columns, elt).str()
          : llvm::formatv("tensor<{0}x{1}x{2}x{3}>", t, s, columns, elt).str();
  std::string routing3 = llvm::formatv(
      "tensor<{0}xi32>, tensor<{1}xi32>, tensor<i32>", capacity, blocks);
  std::string rwType = llvm::formatv("tensor<{0}x{1}xf32>", t, s);
  std::string source = llvm::formatv(
      "func.func @gemm(%x: {0}, %w: {1}, %s: tensor<{2}xi32>, %e: "
      "tensor<{3}xi32>, %n: tensor<i32>{4}) -> {5} {{\n"
      "  %o = moe.grouped_matmul %x, %w, %s, %e, %n{6} input({7}) output({8}) "
      "activation({9}) {{block_m = {10}, num_slots = {11}} : ({0}, {1}, "
      "{12}{13}) "
      "-> {5}\n  return %o : {5}\n}\n",
      inputType, weightsType, capacity, blocks,
      gemm.routedWeights ? ", %rw: " + rwType : "", outputType,
      gemm.routedWeights ? " routed_weights(%rw)" : "",
      gemm.tokenInput ? "token" : "sorted",
      gemm.sortedOutput ? "sorted" : "slot", gemm.activation, blockM, s,
      routing3, gemm.routedWeights ? ", " + rwType : "");
  std::unique_ptr<CpuFunction> function = compile(source);
  ASSERT_TRUE(function);
  std::vector<HostTensor> inputs = {
      input, weights, HostTensor::fromInts({capacity}, routing.sortedIds),
      HostTensor::fromInts({blocks}, routing.expertIds),
      HostTensor::fromInts({}, {routing.numPadded})};
  if (gemm.routedWeights)
    inputs.push_back(routedWeights);
  std::vector<HostTensor> outputs = run(*function, inputs);
  ASSERT_EQ(outputs.size(), 1u);

  // Rows the op never stores (padding) stay zero on the CPU path.
  std::vector<float> expected((gemm.sortedOutput ? capacity : t * s) * columns,
                              0.0f);
  std::vector<float> inputValues = input.toFloats(),
                     weightValues = weights.toFloats(),
                     rwValues = routedWeights.toFloats();
  reference::groupedMatmul(
      routing, t, s, blockM, n, k, inputValues.data(), gemm.tokenInput,
      weightValues.data(), gemm.routedWeights ? rwValues.data() : nullptr,
      toReference(gemm.activation), gemm.sortedOutput, expected.data(),
      [&](float value) { return roundTo(gemm.type, value); });
  expectClose(outputs[0].toFloats(), expected, tolerance(gemm.type));
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
// CpuFunction's own checks
//===----------------------------------------------------------------------===//

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
