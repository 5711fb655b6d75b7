//===- ReferenceC.cpp - C entry points to the reference -------------------===//
//
// Lets test drivers in other languages (the GPU tests in Python) check device
// results against the same reference as the CPU path. Values are fp32; the
// caller rounds to a storage type where it needs one.
//
//===----------------------------------------------------------------------===//

#include "moe/Reference/ReferenceC.h"
#include "moe/Reference/Float16.h"
#include "moe/Reference/Quantization.h"
#include "moe/Reference/Reference.h"

#include <cstring>
#include <optional>

using namespace mlir::moe::reference;

/// The router of the C entry points' flat arguments.
static Router makeRouter(int scoring, int64_t topK, int64_t numGroups,
                         int64_t topkGroups, int renormalize,
                         float routedScalingFactor, int64_t numSharedExperts) {
  Router router;
  router.scoring = scoring ? Scoring::Sigmoid : Scoring::Softmax;
  router.topK = topK;
  router.numGroups = numGroups;
  router.topkGroups = topkGroups;
  router.renormalize = renormalize != 0;
  router.routedScalingFactor = routedScalingFactor;
  router.numSharedExperts = numSharedExperts;
  return router;
}

/// The rounding of intermediates to the storage type `dtype` (0 f32, 1 bf16,
/// 2 f16).
static RoundFn roundingTo(int dtype) {
  return [dtype](float value) {
    if (dtype == 1)
      return fromBFloat16Bits(toBFloat16Bits(value));
    if (dtype == 2)
      return fromHalfBits(toHalfBits(value));
    return value;
  };
}

/// The reference's activation of the C entry points' `activation`: 1
/// SiLU-and-mul, 2 GELU-and-mul, 3 the clamped SwiGLU of `alpha` and `limit`
/// (read for 3 only).
static GatedActivation gatedActivation(int activation, float alpha = 0.0f,
                                       float limit = 0.0f) {
  if (activation == 3)
    return GatedActivation::clampedSwiglu(alpha, limit);
  return activation == 2 ? Activation::GeluAndMul : Activation::SiluAndMul;
}

extern "C" {

/// moe.gate; `scoring` 0 is softmax, 1 sigmoid; `bias` may be null.
void moe_reference_gate(int scoring, int64_t topK, int64_t numGroups,
                        int64_t topkGroups, int renormalize,
                        float routedScalingFactor, int64_t numSharedExperts,
                        int64_t numTokens, int64_t numExperts,
                        const float *logits, const float *bias, float *weights,
                        int32_t *ids) {
  Router router = makeRouter(scoring, topK, numGroups, topkGroups, renormalize,
                             routedScalingFactor, numSharedExperts);
  gate(router, numTokens, numExperts, logits, bias, weights, ids);
}

/// moe.route into caller buffers of routeCapacity and its blocks.
void moe_reference_route(int64_t numTokens, int64_t numSlots,
                         const int32_t *ids, int64_t numExperts, int64_t blockM,
                         int32_t *sortedIds, int32_t *expertIds,
                         int32_t *numPadded) {
  Routing routing = route(numTokens, numSlots, ids, numExperts, blockM);
  std::memcpy(sortedIds, routing.sortedIds.data(),
              routing.sortedIds.size() * sizeof(int32_t));
  std::memcpy(expertIds, routing.expertIds.data(),
              routing.expertIds.size() * sizeof(int32_t));
  *numPadded = routing.numPadded;
}

/// moe.combine in fp32; `weights` may be null.
void moe_reference_combine(int64_t numTokens, int64_t numSlots,
                           int64_t hiddenSize, const float *rows,
                           const float *weights, float *output) {
  combine(numTokens, numSlots, hiddenSize, rows, weights, output,
          [](float value) { return value; });
}

/// moe.fused_moe with the intermediates rounded to the storage type `dtype`
/// (0 f32, 1 bf16, 2 f16); `activation` 1 is SiLU-and-mul, 2 GELU-and-mul,
/// 3 the clamped SwiGLU of `alpha` and `limit`; `w13Bias` [E+X, 2I] and
/// `w2Bias` [E+X, H] the expert biases or null.
void moe_reference_fused_moe(
    int scoring, int64_t topK, int64_t numGroups, int64_t topkGroups,
    int renormalize, float routedScalingFactor, int64_t numSharedExperts,
    int activation, float alpha, float limit, int dtype, int64_t numTokens,
    int64_t hiddenSize, int64_t numExperts, int64_t intermediate,
    const float *hidden, const float *logits, const float *bias,
    const float *w13, const float *w2, const float *w13Bias,
    const float *w2Bias, float *output) {
  Router router = makeRouter(scoring, topK, numGroups, topkGroups, renormalize,
                             routedScalingFactor, numSharedExperts);
  fusedMoe(router, gatedActivation(activation, alpha, limit), numTokens,
           hiddenSize, numExperts, intermediate, hidden, logits, bias, w13, w2,
           output, roundingTo(dtype), {w13Bias, w2Bias});
}

/// moe.fused_experts over `numExperts` stored experts, rounded, activated
/// and biased as moe_reference_fused_moe; slots whose ids are out of range
/// are skipped.
void moe_reference_fused_experts(int activation, float alpha, float limit,
                                 int dtype, int64_t numTokens,
                                 int64_t hiddenSize, int64_t numExperts,
                                 int64_t intermediate, int64_t numSlots,
                                 const float *hidden, const int32_t *ids,
                                 const float *weights, const float *w13,
                                 const float *w2, const float *w13Bias,
                                 const float *w2Bias, float *output) {
  fusedExperts(gatedActivation(activation, alpha, limit), numTokens, hiddenSize,
               numExperts, intermediate, numSlots, hidden, ids, weights, w13,
               w2, output, roundingTo(dtype), {w13Bias, w2Bias});
}

} // extern "C"

//===----------------------------------------------------------------------===//
// FP8 (Quantization.h)
//===----------------------------------------------------------------------===//

/// The FP8 scheme of the C entry points' `scaling` (0 tensor, 1 channel, 2
/// block, as #moe.quantization's `weights`) and `blockSize` (read for block
/// scaling only).
static Fp8Scheme makeFp8Scheme(int scaling, int64_t blockSize) {
  Fp8Scheme scheme;
  scheme.scaling = scaling == 0   ? Fp8Scaling::Tensor
                   : scaling == 1 ? Fp8Scaling::Channel
                                  : Fp8Scaling::Block;
  scheme.blockSize = blockSize;
  return scheme;
}

/// The static input scales of the C entry points' `inputScales` (w13's and
/// w2's), none for dynamic quantization when it is null.
static std::optional<StaticInputScales>
makeStaticInputScales(const float *inputScales) {
  if (!inputScales)
    return std::nullopt;
  return StaticInputScales{inputScales[0], inputScales[1]};
}

extern "C" {

/// toE4M3 over `count` floats.
void moe_reference_to_e4m3(int64_t count, const float *values, uint8_t *codes) {
  for (int64_t i = 0; i < count; ++i)
    codes[i] = toE4M3(values[i]);
}

/// fromE4M3 over `count` codes.
void moe_reference_from_e4m3(int64_t count, const uint8_t *codes,
                             float *values) {
  for (int64_t i = 0; i < count; ++i)
    values[i] = fromE4M3(codes[i]);
}

/// quantizeE4M3: x [rows, k] -> codes [rows, k], scales
/// [rows, ceil(k / groupSize)].
void moe_reference_quantize_e4m3(int64_t rows, int64_t k, int64_t groupSize,
                                 const float *x, uint8_t *codes,
                                 float *scales) {
  quantizeE4M3(rows, k, groupSize, x, codes, scales);
}

/// fusedExpertsFp8: moe_reference_fused_experts on e4m3 weights (codes) and
/// their scales, `scaling` 0 tensor, 1 channel, 2 block (of `blockSize`);
/// `inputScales` [2] the static scales of the w13 and w2 inputs, or null
/// for dynamic quantization.
void moe_reference_fused_experts_fp8(int scaling, int64_t blockSize,
                                     int activation, int dtype,
                                     int64_t numTokens, int64_t hiddenSize,
                                     int64_t numExperts, int64_t intermediate,
                                     int64_t numSlots, const float *hidden,
                                     const int32_t *ids, const float *weights,
                                     const uint8_t *w13, const float *w13Scales,
                                     const uint8_t *w2, const float *w2Scales,
                                     const float *inputScales, float *output) {
  std::optional<StaticInputScales> scales = makeStaticInputScales(inputScales);
  fusedExpertsFp8(makeFp8Scheme(scaling, blockSize),
                  gatedActivation(activation), numTokens, hiddenSize,
                  numExperts, intermediate, numSlots, hidden, ids, weights, w13,
                  w13Scales, w2, w2Scales, scales ? &*scales : nullptr, output,
                  roundingTo(dtype));
}

/// calibrateInputScales: the static input scales of the experts of
/// moe_reference_fused_experts_fp8 calibrated on `hidden`, stored in
/// `inputScales` [2] (w13's, w2's).
void moe_reference_calibrate_fp8(int scaling, int64_t blockSize, int activation,
                                 int dtype, int64_t numTokens,
                                 int64_t hiddenSize, int64_t numExperts,
                                 int64_t intermediate, int64_t numSlots,
                                 const float *hidden, const int32_t *ids,
                                 const uint8_t *w13, const float *w13Scales,
                                 float *inputScales) {
  StaticInputScales scales = calibrateInputScales(
      makeFp8Scheme(scaling, blockSize), gatedActivation(activation), numTokens,
      hiddenSize, numExperts, intermediate, numSlots, hidden, ids, w13,
      w13Scales, roundingTo(dtype));
  inputScales[0] = scales.w13;
  inputScales[1] = scales.w2;
}

/// fusedMoeFp8: moe_reference_fused_moe on e4m3 weights (codes) and their
/// scales, scaled and quantized as moe_reference_fused_experts_fp8.
void moe_reference_fused_moe_fp8(
    int scoring, int64_t topK, int64_t numGroups, int64_t topkGroups,
    int renormalize, float routedScalingFactor, int64_t numSharedExperts,
    int scaling, int64_t blockSize, int activation, int dtype,
    int64_t numTokens, int64_t hiddenSize, int64_t numExperts,
    int64_t intermediate, const float *hidden, const float *logits,
    const float *bias, const uint8_t *w13, const float *w13Scales,
    const uint8_t *w2, const float *w2Scales, const float *inputScales,
    float *output) {
  Router router = makeRouter(scoring, topK, numGroups, topkGroups, renormalize,
                             routedScalingFactor, numSharedExperts);
  std::optional<StaticInputScales> scales = makeStaticInputScales(inputScales);
  fusedMoeFp8(router, makeFp8Scheme(scaling, blockSize),
              gatedActivation(activation), numTokens, hiddenSize, numExperts,
              intermediate, hidden, logits, bias, w13, w13Scales, w2, w2Scales,
              scales ? &*scales : nullptr, output, roundingTo(dtype));
}

} // extern "C"
