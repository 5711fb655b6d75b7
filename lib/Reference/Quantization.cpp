//===- Quantization.cpp - Plain C++ reference of the FP8 semantics --------===//
//
// Written to be read rather than to be fast, and without the bit tricks an
// encoder would use: toE4M3 searches the e4m3 values themselves, so that it
// checks the lowering's integer encoder instead of repeating it.
//
//===----------------------------------------------------------------------===//

#include "moe/Reference/Quantization.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

using namespace mlir::moe::reference;

float mlir::moe::reference::fromE4M3(uint8_t code) {
  float sign = (code & 0x80) ? -1.0f : 1.0f;
  int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7)
    return std::copysign(std::numeric_limits<float>::quiet_NaN(), sign);
  if (exponent == 0)
    return sign * std::ldexp(float(mantissa), -9);
  return sign * std::ldexp(float(8 + mantissa), exponent - 10);
}

float mlir::moe::reference::fromE2M1(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f,
                                           2.0f, 3.0f, 4.0f, 6.0f};
  float magnitude = kMagnitudes[code & 0x7];
  return (code & 0x8) ? -magnitude : magnitude;
}

float mlir::moe::reference::fromE8M0(uint8_t code) {
  if (code == 0xFF)
    return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(code) - 127);
}

std::vector<float> mlir::moe::reference::decodeMxfp4(int64_t rows, int64_t k,
                                                     const uint8_t *codes,
                                                     const uint8_t *scales) {
  std::vector<float> values(rows * k);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t column = 0; column < k; ++column) {
      uint8_t byte = codes[row * (k / 2) + column / 2];
      uint8_t code = column % 2 ? byte >> 4 : byte & 0xF;
      float scale =
          fromE8M0(scales[row * (k / kMxBlockSize) + column / kMxBlockSize]);
      values[row * k + column] = fromE2M1(code) * scale;
    }
  return values;
}

/// The e2m1 code of `x` (already divided by its block's scale): the
/// nearest magnitude, ties to the even code, beyond 6 saturating.
static uint8_t toE2M1(double x) {
  uint8_t best = 0;
  for (uint8_t code = 1; code < 8; ++code) {
    double distance = std::fabs(std::fabs(x) - fromE2M1(code));
    double bestDistance = std::fabs(std::fabs(x) - fromE2M1(best));
    if (distance < bestDistance || (distance == bestDistance && code % 2 == 0))
      best = code;
  }
  return std::signbit(x) ? best | 0x8 : best;
}

void mlir::moe::reference::quantizeMxfp4(int64_t rows, int64_t k,
                                         const float *values, uint8_t *codes,
                                         uint8_t *scales) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t block = 0; block < k / kMxBlockSize; ++block) {
      const float *x = values + row * k + block * kMxBlockSize;
      float amax = 0.0f;
      for (int64_t i = 0; i < kMxBlockSize; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      // amax = m 2^p, m in [0.5, 1): m 2^(p - e) <= 6 first holds for
      // e = p - 3 when m <= 0.75, else for e = p - 2.
      int power;
      float mantissa = std::frexp(amax, &power);
      int exponent = std::clamp(
          amax == 0.0f ? -127 : power - (mantissa <= 0.75f ? 3 : 2), -127, 127);
      scales[row * (k / kMxBlockSize) + block] =
          static_cast<uint8_t>(exponent + 127);
      for (int64_t i = 0; i < kMxBlockSize; ++i) {
        uint8_t code = toE2M1(std::ldexp(double(x[i]), -exponent));
        uint8_t &byte = codes[(row * k + block * kMxBlockSize + i) / 2];
        byte = i % 2 ? (byte & 0x0F) | (code << 4) : code;
      }
    }
}

/// The values of the non-negative finite codes 0x00 to 0x7E, increasing.
static const std::array<double, 0x7F> &nonNegativeE4M3Values() {
  static const std::array<double, 0x7F> values = [] {
    std::array<double, 0x7F> decoded;
    for (int code = 0; code < 0x7F; ++code)
      decoded[code] = fromE4M3(static_cast<uint8_t>(code));
    return decoded;
  }();
  return values;
}

uint8_t mlir::moe::reference::toE4M3(float x) {
  if (std::isnan(x))
    return 0x7F;
  uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  double magnitude = std::fabs(double(x));
  // Beyond the largest finite value every value saturates to it; far beyond
  // it, distances in double would no longer tell the values apart.
  if (magnitude >= kE4M3Max)
    return sign | 0x7E;
  // The nearest non-negative finite value, ties to the even code. Where two
  // distances are close enough for rounding to matter, x is near the
  // midpoint of two neighbouring values and within a factor of two of each
  // (or the value is 0), so that with its 24 significant bits both distances
  // are exact in double.
  const std::array<double, 0x7F> &values = nonNegativeE4M3Values();
  uint8_t best = 0;
  double bestDistance = magnitude;
  for (int code = 1; code < 0x7F; ++code) {
    double distance = std::fabs(magnitude - values[code]);
    if (distance < bestDistance ||
        (distance == bestDistance && code % 2 == 0)) {
      best = static_cast<uint8_t>(code);
      bestDistance = distance;
    }
  }
  return sign | best;
}

/// max(a, b) that is NaN when either is, unlike std::max and fmax.
static float maxOrNan(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<float>::quiet_NaN();
  return std::max(a, b);
}

/// Quantizes each group [begin, end) of each row of x [rows, k] by the
/// scale `scaleOf(row, begin, end)` gives it, stored in `scales`.
template <typename ScaleFn>
static void quantizeGroups(int64_t rows, int64_t k, int64_t groupSize,
                           const float *x, uint8_t *q, float *scales,
                           ScaleFn scaleOf) {
  int64_t numGroups = (k + groupSize - 1) / groupSize;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t g = 0; g < numGroups; ++g) {
      int64_t begin = g * groupSize, end = std::min(begin + groupSize, k);
      float scale = scaleOf(x + m * k, begin, end);
      scales[m * numGroups + g] = scale;
      for (int64_t c = begin; c < end; ++c)
        q[m * k + c] = toE4M3(x[m * k + c] / scale);
    }
  }
}

void mlir::moe::reference::quantizeE4M3(int64_t rows, int64_t k,
                                        int64_t groupSize, const float *x,
                                        uint8_t *q, float *scales) {
  quantizeGroups(rows, k, groupSize, x, q, scales,
                 [](const float *row, int64_t begin, int64_t end) {
                   float amax = 0.0f;
                   for (int64_t c = begin; c < end; ++c)
                     amax = maxOrNan(amax, std::fabs(row[c]));
                   // The floor keeps an all-zero group's scale nonzero, so
                   // that its quotients are 0 rather than 0/0.
                   return maxOrNan(amax, 1e-10f) / kE4M3Max;
                 });
}

void mlir::moe::reference::quantizeE4M3Static(int64_t rows, int64_t k,
                                              int64_t groupSize, float scale,
                                              const float *x, uint8_t *q,
                                              float *scales) {
  quantizeGroups(rows, k, groupSize, x, q, scales,
                 [&](const float *, int64_t, int64_t) { return scale; });
}

int64_t Fp8Scheme::groupSize(int64_t k) const {
  return scaling == Fp8Scaling::Block ? blockSize : k;
}

int64_t Fp8Scheme::numGroups(int64_t k) const {
  int64_t size = groupSize(k);
  return (k + size - 1) / size;
}

/// The fp32 sum, in order, of the products of `count` e4m3 codes of a and w
/// (each product exact in fp32).
static float e4m3Dot(const uint8_t *a, const uint8_t *w, int64_t count) {
  float sum = 0.0f;
  for (int64_t i = 0; i < count; ++i)
    sum += fromE4M3(a[i]) * fromE4M3(w[i]);
  return sum;
}

/// h [n] = the e4m3 row a [k] with its scales `aScales` times the weights of
/// `expert` ([E, n, k] codes) with their scales `weightScales`, scaled as
/// `scheme` says (scaledGroupedMatmul).
static void scaledRowTimesWeights(const Fp8Scheme &scheme, const uint8_t *a,
                                  const float *aScales, const uint8_t *weights,
                                  const float *weightScales, int64_t expert,
                                  int64_t n, int64_t k, float *h) {
  for (int64_t nn = 0; nn < n; ++nn) {
    const uint8_t *w = weights + (expert * n + nn) * k;
    switch (scheme.scaling) {
    case Fp8Scaling::Block: {
      int64_t blockSize = scheme.blockSize;
      int64_t kBlocks = (k + blockSize - 1) / blockSize;
      int64_t nBlocks = (n + blockSize - 1) / blockSize;
      const float *wScales =
          weightScales + (expert * nBlocks + nn / blockSize) * kBlocks;
      float acc = 0.0f;
      for (int64_t kb = 0; kb < kBlocks; ++kb) {
        int64_t begin = kb * blockSize;
        float partial =
            e4m3Dot(a + begin, w + begin, std::min(blockSize, k - begin));
        acc += partial * (aScales[kb] * wScales[kb]);
      }
      h[nn] = acc;
      break;
    }
    case Fp8Scaling::Channel:
      h[nn] = e4m3Dot(a, w, k) * (aScales[0] * weightScales[expert * n + nn]);
      break;
    case Fp8Scaling::Tensor:
      h[nn] = e4m3Dot(a, w, k) * (aScales[0] * weightScales[expert]);
      break;
    }
  }
}

void mlir::moe::reference::scaledGroupedMatmul(
    const Fp8Scheme &scheme, const Routing &routing, int64_t numTokens,
    int64_t numSlots, int64_t blockM, int64_t n, int64_t k,
    const uint8_t *input, const float *inputScales, bool tokenOrder,
    const uint8_t *weights, const float *weightScales,
    const float *routedWeights, const GatedActivation &activation,
    bool sortedOutput, float *output, const RoundFn &round, const float *bias) {
  int64_t inputGroups = scheme.numGroups(k);
  groupedMatmul(
      routing, numTokens, numSlots, blockM, n, tokenOrder,
      [&](int64_t row, int64_t expert, float *h) {
        scaledRowTimesWeights(scheme, input + row * k,
                              inputScales + row * inputGroups, weights,
                              weightScales, expert, n, k, h);
      },
      routedWeights, activation, sortedOutput, output, round, bias);
}

/// Quantizes the rows of x [rows, k] as an input of a GEMM scaled per
/// `scheme`: by `staticScale` when given, else dynamically.
static void quantizeInput(const Fp8Scheme &scheme, const float *staticScale,
                          int64_t rows, int64_t k, const float *x, uint8_t *q,
                          float *scales) {
  if (staticScale)
    quantizeE4M3Static(rows, k, scheme.groupSize(k), *staticScale, x, q,
                       scales);
  else
    quantizeE4M3(rows, k, scheme.groupSize(k), x, q, scales);
}

/// The hidden rows [T, H] of a layer rounded by `round`.
static std::vector<float> roundedRows(int64_t numTokens, int64_t hiddenSize,
                                      const float *hidden,
                                      const RoundFn &round) {
  std::vector<float> rounded(numTokens * hiddenSize);
  for (int64_t i = 0; i < numTokens * hiddenSize; ++i)
    rounded[i] = round(hidden[i]);
  return rounded;
}

/// The first products of a layer's experts on e4m3 weights w13: a token's
/// hidden row, rounded by `round` and quantized (by `staticScale` when
/// given), times w13[expert]^T scaled per `scheme`. Quantization is row by
/// row, so every token's row is quantized once, up front, as it would be
/// alone.
static std::function<void(int64_t, int64_t, float *)>
scaledUpProducts(const Fp8Scheme &scheme, const float *staticScale,
                 int64_t numTokens, int64_t hiddenSize, int64_t intermediate,
                 const float *hidden, const uint8_t *w13,
                 const float *w13Scales, const RoundFn &round) {
  std::vector<float> rounded =
      roundedRows(numTokens, hiddenSize, hidden, round);
  int64_t groups = scheme.numGroups(hiddenSize);
  std::vector<uint8_t> codes(numTokens * hiddenSize);
  std::vector<float> scales(numTokens * groups);
  quantizeInput(scheme, staticScale, numTokens, hiddenSize, rounded.data(),
                codes.data(), scales.data());
  return [=, codes = std::move(codes),
          scales = std::move(scales)](int64_t token, int64_t expert, float *h) {
    scaledRowTimesWeights(scheme, codes.data() + token * hiddenSize,
                          scales.data() + token * groups, w13, w13Scales,
                          expert, 2 * intermediate, hiddenSize, h);
  };
}

void mlir::moe::reference::fusedExpertsFp8(
    const Fp8Scheme &scheme, const GatedActivation &activation,
    int64_t numTokens, int64_t hiddenSize, int64_t numExperts,
    int64_t intermediate, int64_t numSlots, const float *hidden,
    const int32_t *ids, const float *slotWeights, const uint8_t *w13,
    const float *w13Scales, const uint8_t *w2, const float *w2Scales,
    const StaticInputScales *inputScales, float *output, const RoundFn &round,
    const ExpertBiases &biases) {
  std::vector<uint8_t> aq(intermediate);
  std::vector<float> as(scheme.numGroups(intermediate));
  ExpertProducts products;
  products.up = scaledUpProducts(
      scheme, inputScales ? &inputScales->w13 : nullptr, numTokens, hiddenSize,
      intermediate, hidden, w13, w13Scales, round);
  products.down = [&](int64_t expert, const float *a, float *y) {
    quantizeInput(scheme, inputScales ? &inputScales->w2 : nullptr, 1,
                  intermediate, a, aq.data(), as.data());
    scaledRowTimesWeights(scheme, aq.data(), as.data(), w2, w2Scales, expert,
                          hiddenSize, intermediate, y);
  };
  fusedExperts(activation, numTokens, hiddenSize, numExperts, intermediate,
               numSlots, ids, slotWeights, products, output, round, biases);
}

StaticInputScales mlir::moe::reference::calibrateInputScales(
    const Fp8Scheme &scheme, const GatedActivation &activation,
    int64_t numTokens, int64_t hiddenSize, int64_t numExperts,
    int64_t intermediate, int64_t numSlots, const float *hidden,
    const int32_t *ids, const uint8_t *w13, const float *w13Scales,
    const RoundFn &round) {
  auto scaleOf = [](float amax) { return maxOrNan(amax, 1e-10f) / kE4M3Max; };
  float hiddenAmax = 0.0f, activationAmax = 0.0f;
  for (float value : roundedRows(numTokens, hiddenSize, hidden, round))
    hiddenAmax = maxOrNan(hiddenAmax, std::fabs(value));
  // The experts' loop with the second products replaced by the amax of
  // their inputs.
  ExpertProducts products;
  products.up =
      scaledUpProducts(scheme, /*staticScale=*/nullptr, numTokens, hiddenSize,
                       intermediate, hidden, w13, w13Scales, round);
  products.down = [&](int64_t, const float *a, float *y) {
    for (int64_t i = 0; i < intermediate; ++i)
      activationAmax = maxOrNan(activationAmax, std::fabs(a[i]));
    std::fill(y, y + hiddenSize, 0.0f);
  };
  std::vector<float> slotWeights(numTokens * numSlots, 1.0f),
      output(numTokens * hiddenSize);
  fusedExperts(activation, numTokens, hiddenSize, numExperts, intermediate,
               numSlots, ids, slotWeights.data(), products, output.data(),
               round);
  return {scaleOf(hiddenAmax), scaleOf(activationAmax)};
}

void mlir::moe::reference::fusedMoeFp8(
    const Router &router, const Fp8Scheme &scheme,
    const GatedActivation &activation, int64_t numTokens, int64_t hiddenSize,
    int64_t numExperts, int64_t intermediate, const float *hidden,
    const float *logits, const float *bias, const uint8_t *w13,
    const float *w13Scales, const uint8_t *w2, const float *w2Scales,
    const StaticInputScales *inputScales, float *output, const RoundFn &round) {
  int64_t numSlots = router.numSlots();
  std::vector<float> slotWeights(numTokens * numSlots);
  std::vector<int32_t> slotIds(numTokens * numSlots);
  gate(router, numTokens, numExperts, logits, bias, slotWeights.data(),
       slotIds.data());
  fusedExpertsFp8(scheme, activation, numTokens, hiddenSize,
                  numExperts + router.numSharedExperts, intermediate, numSlots,
                  hidden, slotIds.data(), slotWeights.data(), w13, w13Scales,
                  w2, w2Scales, inputScales, output, round);
}
