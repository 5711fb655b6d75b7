//===- ReferenceC.h - C entry points to the reference -----------*- C++ -*-===//
//
// The reference's C API (libmoe_reference.so), for test drivers in other
// languages and for tests of the API itself; lib/Reference/ReferenceC.cpp
// documents each entry point. Values are fp32, e4m3 values one-byte codes.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_REFERENCE_REFERENCEC_H
#define MOE_REFERENCE_REFERENCEC_H

#include <cstdint>

extern "C" {

void moe_reference_gate(int scoring, int64_t topK, int64_t numGroups,
                        int64_t topkGroups, int renormalize,
                        float routedScalingFactor, int64_t numSharedExperts,
                        int64_t numTokens, int64_t numExperts,
                        const float *logits, const float *bias, float *weights,
                        int32_t *ids);
void moe_reference_route(int64_t numTokens, int64_t numSlots,
                         const int32_t *ids, int64_t numExperts, int64_t blockM,
                         int32_t *sortedIds, int32_t *expertIds,
                         int32_t *numPadded);
void moe_reference_combine(int64_t numTokens, int64_t numSlots,
                           int64_t hiddenSize, const float *rows,
                           const float *weights, float *output);
void moe_reference_fused_moe(
    int scoring, int64_t topK, int64_t numGroups, int64_t topkGroups,
    int renormalize, float routedScalingFactor, int64_t numSharedExperts,
    int activation, float alpha, float limit, int dtype, int64_t numTokens,
    int64_t hiddenSize, int64_t numExperts, int64_t intermediate,
    const float *hidden, const float *logits, const float *bias,
    const float *w13, const float *w2, const float *w13Bias,
    const float *w2Bias, float *output);
void moe_reference_fused_experts(int activation, float alpha, float limit,
                                 int dtype, int64_t numTokens,
                                 int64_t hiddenSize, int64_t numExperts,
                                 int64_t intermediate, int64_t numSlots,
                                 const float *hidden, const int32_t *ids,
                                 const float *weights, const float *w13,
                                 const float *w2, const float *w13Bias,
                                 const float *w2Bias, float *output);

void moe_reference_to_e4m3(int64_t count, const float *values, uint8_t *codes);
void moe_reference_from_e4m3(int64_t count, const uint8_t *codes,
                             float *values);
void moe_reference_quantize_e4m3(int64_t rows, int64_t k, int64_t groupSize,
                                 const float *x, uint8_t *codes, float *scales);
void moe_reference_fused_experts_fp8(int scaling, int64_t blockSize,
                                     int activation, int dtype,
                                     int64_t numTokens, int64_t hiddenSize,
                                     int64_t numExperts, int64_t intermediate,
                                     int64_t numSlots, const float *hidden,
                                     const int32_t *ids, const float *weights,
                                     const uint8_t *w13, const float *w13Scales,
                                     const uint8_t *w2, const float *w2Scales,
                                     const float *inputScales, float *output);
void moe_reference_calibrate_fp8(int scaling, int64_t blockSize, int activation,
                                 int dtype, int64_t numTokens,
                                 int64_t hiddenSize, int64_t numExperts,
                                 int64_t intermediate, int64_t numSlots,
                                 const float *hidden, const int32_t *ids,
                                 const uint8_t *w13, const float *w13Scales,
                                 float *inputScales);
void moe_reference_fused_moe_fp8(
    int scoring, int64_t topK, int64_t numGroups, int64_t topkGroups,
    int renormalize, float routedScalingFactor, int64_t numSharedExperts,
    int scaling, int64_t blockSize, int activation, int dtype,
    int64_t numTokens, int64_t hiddenSize, int64_t numExperts,
    int64_t intermediate, const float *hidden, const float *logits,
    const float *bias, const uint8_t *w13, const float *w13Scales,
    const uint8_t *w2, const float *w2Scales, const float *inputScales,
    float *output);

} // extern "C"

#endif // MOE_REFERENCE_REFERENCEC_H
