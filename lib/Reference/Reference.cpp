//===- Reference.cpp - Plain C++ reference of the moe ops -----------------===//
//
// Written to be read rather than to be fast: every sum runs in the order the
// op descriptions fix, so that the results match the lowering bit for bit.
//
//===----------------------------------------------------------------------===//

#include "moe/Reference/Reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

using namespace mlir::moe::reference;

/// The strict total order of selection: any number beats NaN, a larger
/// value beats a smaller one, and ties (two NaNs included) go to the lower
/// index, so that a row of NaNs still yields distinct in-range ids.
static bool isBetter(float a, int64_t indexA, float b, int64_t indexB) {
  bool aIsNan = std::isnan(a), bIsNan = std::isnan(b);
  if (aIsNan != bIsNan)
    return bIsNan;
  if (!aIsNan && a != b)
    return a > b;
  return indexA < indexB;
}

/// Sorts `indices` best first by `values[index]` under isBetter.
static void sortBestFirst(const std::vector<float> &values,
                          std::vector<int64_t> &indices) {
  std::sort(indices.begin(), indices.end(), [&](int64_t i, int64_t j) {
    return isBetter(values[i], i, values[j], j);
  });
}

/// The activation of a gated pair: act(gate) * up, or the clamped SwiGLU.
static float activateAndMul(const GatedActivation &activation, float gate,
                            float up) {
  switch (activation.kind) {
  case Activation::SiluAndMul:
    return gate / (1.0f + std::exp(-gate)) * up;
  case Activation::GeluAndMul:
    return 0.5f * gate * (1.0f + std::erf(gate * 0.70710678118654752440f)) * up;
  case Activation::ClampedSwiglu: {
    // std::min and std::max return their first argument when a comparison
    // with NaN fails: NaN stays NaN, as torch's clamp keeps it.
    gate = std::min(gate, activation.limit);
    up = std::max(std::min(up, activation.limit), -activation.limit);
    return (up + 1.0f) * (gate / (1.0f + std::exp(-(activation.alpha * gate))));
  }
  case Activation::None:
    break;
  }
  // Not a gated activation: callers never pair it.
  return gate;
}

/// exp as moe.gate defines it (RoutingMath.h): Cephes expf in fmas, with
/// fixed overflow and underflow bounds, so that every target rounds alike.
static float routingExp(float x) {
  if (std::isnan(x))
    return x;
  if (x > 88.0f)
    return std::numeric_limits<float>::infinity();
  if (x < -87.0f)
    return 0.0f;
  // Round to nearest even through the 1.5 * 2^23 shift, as the IR does.
  float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  for (float coefficient :
       {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
        5.0000001201e-1f})
    p = std::fma(p, r, coefficient);
  float y = std::fma(p, r * r, r) + 1.0f;
  uint32_t scaleBits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127)
                       << 23;
  float scale;
  std::memcpy(&scale, &scaleBits, sizeof(scale));
  return y * scale;
}

/// The fp32 scores of one row of logits.
static std::vector<float> computeScores(Scoring scoring, const float *logits,
                                        int64_t numExperts) {
  std::vector<float> scores(numExperts);
  if (scoring == Scoring::Sigmoid) {
    for (int64_t e = 0; e < numExperts; ++e)
      scores[e] = 1.0f / (1.0f + routingExp(-logits[e]));
    return scores;
  }
  // NaN logits take no part: the max skips them, they add nothing to the
  // denominator, and their scores stay NaN.
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t e = 0; e < numExperts; ++e)
    if (!std::isnan(logits[e]))
      max = std::max(max, logits[e]);
  // The denominator in its defined order: 32 strided partial sums, then
  // added pairwise. x - max is 0 where x is the max, so that +inf logits
  // (or a row of -inf) share the weight rather than scoring NaN.
  float partials[32] = {};
  for (int64_t e = 0; e < numExperts; ++e) {
    scores[e] = routingExp(logits[e] == max ? 0.0f : logits[e] - max);
    if (!std::isnan(scores[e]))
      partials[e % 32] += scores[e];
  }
  for (int stride = 1; stride < 32; stride *= 2)
    for (int lane = 0; lane < 32; lane += 2 * stride)
      partials[lane] += partials[lane + stride];
  for (int64_t e = 0; e < numExperts; ++e)
    scores[e] /= partials[0];
  return scores;
}

/// The experts still eligible after grouped top-k (all of them with one
/// group).
static std::vector<int64_t> eligibleExperts(const Router &router,
                                            const std::vector<float> &sel) {
  int64_t numExperts = sel.size();
  std::vector<int64_t> eligible(numExperts);
  std::iota(eligible.begin(), eligible.end(), 0);
  if (router.numGroups <= 1)
    return eligible;

  int64_t groupSize = numExperts / router.numGroups;
  std::vector<float> groupScores(router.numGroups);
  for (int64_t g = 0; g < router.numGroups; ++g) {
    std::vector<int64_t> members(eligible.begin() + g * groupSize,
                                 eligible.begin() + (g + 1) * groupSize);
    sortBestFirst(sel, members);
    groupScores[g] = sel[members[0]] + sel[members[1]];
  }
  std::vector<int64_t> groups(router.numGroups);
  std::iota(groups.begin(), groups.end(), 0);
  sortBestFirst(groupScores, groups);
  groups.resize(router.topkGroups);

  std::vector<int64_t> kept;
  for (int64_t e = 0; e < numExperts; ++e)
    if (std::find(groups.begin(), groups.end(), e / groupSize) != groups.end())
      kept.push_back(e);
  return kept;
}

void mlir::moe::reference::gate(const Router &router, int64_t numTokens,
                                int64_t numExperts, const float *logits,
                                const float *bias, float *weights,
                                int32_t *ids) {
  int64_t numSlots = router.numSlots();
  for (int64_t t = 0; t < numTokens; ++t) {
    std::vector<float> scores =
        computeScores(router.scoring, logits + t * numExperts, numExperts);
    // The bias steers selection only; the weights use the unbiased scores.
    std::vector<float> sel(scores);
    if (bias)
      for (int64_t e = 0; e < numExperts; ++e)
        sel[e] += bias[e];

    std::vector<int64_t> chosen = eligibleExperts(router, sel);
    sortBestFirst(sel, chosen);

    float *rowWeights = weights + t * numSlots;
    int32_t *rowIds = ids + t * numSlots;
    for (int64_t s = 0; s < router.topK; ++s) {
      float score = scores[chosen[s]];
      rowIds[s] = static_cast<int32_t>(chosen[s]);
      rowWeights[s] = std::isnan(score) ? 0.0f : score;
    }
    if (router.renormalize) {
      float sum = 0.0f;
      for (int64_t s = 0; s < router.topK; ++s)
        sum += rowWeights[s];
      for (int64_t s = 0; s < router.topK; ++s)
        rowWeights[s] /= sum + 1e-20f;
    }
    for (int64_t s = 0; s < router.topK; ++s)
      rowWeights[s] *= router.routedScalingFactor;

    for (int64_t i = 0; i < router.numSharedExperts; ++i) {
      rowIds[router.topK + i] = static_cast<int32_t>(numExperts + i);
      rowWeights[router.topK + i] = 1.0f;
    }
  }
}

int64_t mlir::moe::reference::routeCapacity(int64_t numTokens, int64_t numSlots,
                                            int64_t numExperts,
                                            int64_t blockM) {
  return numTokens * numSlots + numExperts * (blockM - 1);
}

Routing mlir::moe::reference::route(int64_t numTokens, int64_t numSlots,
                                    const int32_t *ids, int64_t numExperts,
                                    int64_t blockM) {
  int64_t numRouted = numTokens * numSlots;
  int64_t capacity = routeCapacity(numTokens, numSlots, numExperts, blockM);
  auto isValid = [&](int32_t id) { return id >= 0 && id < numExperts; };

  std::vector<int64_t> counts(numExperts, 0);
  for (int64_t slot = 0; slot < numRouted; ++slot)
    if (isValid(ids[slot]))
      ++counts[ids[slot]];

  Routing routing;
  routing.sortedIds.assign(capacity, static_cast<int32_t>(numRouted));
  routing.expertIds.assign((capacity + blockM - 1) / blockM, -1);

  // Each expert's run starts at a multiple of blockM, so every block of rows
  // belongs to exactly one expert.
  std::vector<int64_t> next(numExperts);
  int64_t offset = 0;
  for (int64_t e = 0; e < numExperts; ++e) {
    next[e] = offset;
    int64_t padded = (counts[e] + blockM - 1) / blockM * blockM;
    for (int64_t row = offset; row < offset + padded; row += blockM)
      routing.expertIds[row / blockM] = static_cast<int32_t>(e);
    offset += padded;
  }
  routing.numPadded = static_cast<int32_t>(offset);

  // Visiting the slots in increasing order makes the sort stable.
  for (int64_t slot = 0; slot < numRouted; ++slot)
    if (isValid(ids[slot]))
      routing.sortedIds[next[ids[slot]]++] = static_cast<int32_t>(slot);
  return routing;
}

/// h [n] = x [k] times w [n, k]^T, each sum in fp32 in K order.
static void rowTimesWeights(const float *x, const float *w, int64_t n,
                            int64_t k, float *h) {
  for (int64_t nn = 0; nn < n; ++nn) {
    h[nn] = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk)
      h[nn] += x[kk] * w[nn * k + kk];
  }
}

/// Adds `bias` [n] (when given) to `sums` [n].
static void addBias(const float *bias, int64_t n, float *sums) {
  if (bias)
    for (int64_t i = 0; i < n; ++i)
      sums[i] += bias[i];
}

void mlir::moe::reference::groupedMatmul(
    const Routing &routing, int64_t numTokens, int64_t numSlots, int64_t blockM,
    int64_t n, bool tokenOrder, const RowProductFn &product,
    const float *routedWeights, const GatedActivation &activation,
    bool sortedOutput, float *output, const RoundFn &round, const float *bias) {
  int64_t numRouted = numTokens * numSlots;
  bool gated = activation.kind != Activation::None;
  int64_t outN = gated ? n / 2 : n;
  std::vector<float> acc(n);
  for (int64_t r = 0; r < routing.numPadded; ++r) {
    int64_t slot = routing.sortedIds[r];
    if (slot < 0 || slot >= numRouted)
      continue;
    int64_t expert = routing.expertIds[r / blockM];
    product(tokenOrder ? slot / numSlots : r, expert, acc.data());
    addBias(bias ? bias + expert * n : nullptr, n, acc.data());
    float *out = output + (sortedOutput ? r : slot) * outN;
    for (int64_t j = 0; j < outN; ++j) {
      float value =
          gated ? activateAndMul(activation, acc[j], acc[j + outN]) : acc[j];
      if (routedWeights)
        value *= routedWeights[slot];
      out[j] = round(value);
    }
  }
}

void mlir::moe::reference::groupedMatmul(
    const Routing &routing, int64_t numTokens, int64_t numSlots, int64_t blockM,
    int64_t n, int64_t k, const float *input, bool tokenOrder,
    const float *weights, const float *routedWeights,
    const GatedActivation &activation, bool sortedOutput, float *output,
    const RoundFn &round, const float *bias) {
  groupedMatmul(
      routing, numTokens, numSlots, blockM, n, tokenOrder,
      [&](int64_t row, int64_t expert, float *h) {
        rowTimesWeights(input + row * k, weights + expert * n * k, n, k, h);
      },
      routedWeights, activation, sortedOutput, output, round, bias);
}

void mlir::moe::reference::combine(int64_t numTokens, int64_t numSlots,
                                   int64_t hiddenSize, const float *rows,
                                   const float *weights, float *output,
                                   const RoundFn &round) {
  for (int64_t t = 0; t < numTokens; ++t) {
    for (int64_t h = 0; h < hiddenSize; ++h) {
      float sum = 0.0f;
      for (int64_t s = 0; s < numSlots; ++s) {
        int64_t slot = t * numSlots + s;
        sum += (weights ? weights[slot] : 1.0f) * rows[slot * hiddenSize + h];
      }
      output[t * hiddenSize + h] = round(sum);
    }
  }
}

void mlir::moe::reference::fusedExperts(
    const GatedActivation &activation, int64_t numTokens, int64_t hiddenSize,
    int64_t numExperts, int64_t intermediate, int64_t numSlots,
    const int32_t *ids, const float *slotWeights,
    const ExpertProducts &products, float *output, const RoundFn &round,
    const ExpertBiases &biases) {
  std::vector<float> h1(2 * intermediate), a(intermediate);
  std::vector<float> dot(hiddenSize), y(hiddenSize);
  for (int64_t t = 0; t < numTokens; ++t) {
    std::fill(y.begin(), y.end(), 0.0f);
    for (int64_t s = 0; s < numSlots; ++s) {
      int64_t expert = ids[t * numSlots + s];
      if (expert < 0 || expert >= numExperts)
        continue;
      float weight = slotWeights[t * numSlots + s];
      // a = act(x . w13[e]^T + b13[e]) of the halves, stored rounded.
      products.up(t, expert, h1.data());
      addBias(biases.w13 ? biases.w13 + expert * 2 * intermediate : nullptr,
              2 * intermediate, h1.data());
      for (int64_t j = 0; j < intermediate; ++j)
        a[j] = round(activateAndMul(activation, h1[j], h1[j + intermediate]));
      // The slot's row, weighted and stored rounded, then summed into y.
      products.down(expert, a.data(), dot.data());
      addBias(biases.w2 ? biases.w2 + expert * hiddenSize : nullptr, hiddenSize,
              dot.data());
      for (int64_t h = 0; h < hiddenSize; ++h)
        y[h] += round(weight * dot[h]);
    }
    for (int64_t h = 0; h < hiddenSize; ++h)
      output[t * hiddenSize + h] = round(y[h]);
  }
}

void mlir::moe::reference::fusedExperts(
    const GatedActivation &activation, int64_t numTokens, int64_t hiddenSize,
    int64_t numExperts, int64_t intermediate, int64_t numSlots,
    const float *hidden, const int32_t *ids, const float *slotWeights,
    const float *w13, const float *w2, float *output, const RoundFn &round,
    const ExpertBiases &biases) {
  ExpertProducts products;
  products.up = [&](int64_t token, int64_t expert, float *h) {
    rowTimesWeights(hidden + token * hiddenSize,
                    w13 + expert * 2 * intermediate * hiddenSize,
                    2 * intermediate, hiddenSize, h);
  };
  products.down = [&](int64_t expert, const float *a, float *y) {
    rowTimesWeights(a, w2 + expert * hiddenSize * intermediate, hiddenSize,
                    intermediate, y);
  };
  fusedExperts(activation, numTokens, hiddenSize, numExperts, intermediate,
               numSlots, ids, slotWeights, products, output, round, biases);
}

void mlir::moe::reference::fusedMoe(
    const Router &router, const GatedActivation &activation, int64_t numTokens,
    int64_t hiddenSize, int64_t numExperts, int64_t intermediate,
    const float *hidden, const float *logits, const float *bias,
    const float *w13, const float *w2, float *output, const RoundFn &round,
    const ExpertBiases &experts) {
  int64_t numSlots = router.numSlots();
  std::vector<float> slotWeights(numTokens * numSlots);
  std::vector<int32_t> slotIds(numTokens * numSlots);
  gate(router, numTokens, numExperts, logits, bias, slotWeights.data(),
       slotIds.data());
  fusedExperts(activation, numTokens, hiddenSize,
               numExperts + router.numSharedExperts, intermediate, numSlots,
               hidden, slotIds.data(), slotWeights.data(), w13, w2, output,
               round, experts);
}
