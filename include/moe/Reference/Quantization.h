//===- Quantization.h - Plain C++ reference of the FP8 semantics -*- C++
//-*-===//
//
// The FP8 (W8A8) semantics of the moe ops, written apart from the MLIR
// lowering so that each checks the other: the e4m3 format and its rounding,
// the dynamic and static quantization of activations, and the grouped matmul
// and experts on e4m3 operands with per-block, per-channel or per-tensor
// scales. Values
// are fp32 as in Reference.h; e4m3 values are their uint8 codes.
//
// Every fp32 operation below is a single rounded operation (the library is
// compiled with -ffp-contract=off: no multiply-add is fused).
//
// No MLIR or LLVM headers: plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_REFERENCE_QUANTIZATION_H
#define MOE_REFERENCE_QUANTIZATION_H

#include "moe/Reference/Reference.h"

#include <cstdint>

namespace mlir {
namespace moe {
namespace reference {

//===----------------------------------------------------------------------===//
// float8 e4m3fn
//===----------------------------------------------------------------------===//

/// e4m3 is float8 e4m3fn (OCP FP8; `f8E4M3FN` in MLIR, torch.float8_e4m3fn):
/// 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits. No infinities;
/// 0x7F and 0xFF are NaN. Normal values (exponent field 1 to 15) are
/// (1 + m/8) * 2^(e-7), the largest finite one 0x7E = 448, the smallest
/// normal 2^-6; subnormals (exponent field 0) are m * 2^-9.
constexpr float kE4M3Max = 448.0f;

/// The exact value of the e4m3 code `code` (NaN for 0x7F and 0xFF).
float fromE4M3(uint8_t code);

/// `x` rounded to e4m3 as Hopper's `cvt.rn.satfinite.e4m3x2.f32` does: to
/// the nearest e4m3 value, ties to the one whose mantissa's last bit is 0
/// (the even code); finite magnitudes beyond 448 (those rounding to 464 and
/// more included) and infinities saturate to +-448 (0x7E, 0xFE); NaN gives
/// 0x7F; the sign is kept, so -0 gives 0x80 and magnitudes up to half the
/// smallest subnormal (2^-10, a tie, to the even 0) give +-0.
uint8_t toE4M3(float x);

//===----------------------------------------------------------------------===//
// MXFP4 (OCP MX: e2m1 values, e8m0 scales per 32)
//===----------------------------------------------------------------------===//

/// e2m1 is the 4-bit float of MXFP4: 1 sign bit, 2 exponent bits (bias 1),
/// 1 mantissa bit, no infinities or NaN: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
/// e8m0 is its scale: 2^(code - 127), code 0xFF NaN.
constexpr int64_t kMxBlockSize = 32;

/// The value of the e2m1 code in the low 4 bits of `code`.
float fromE2M1(uint8_t code);

/// 2^(code - 127) (2^-127, a subnormal, for 0), NaN for 0xFF.
float fromE8M0(uint8_t code);

/// The weights [rows, k] (k a multiple of kMxBlockSize) of MXFP4 `codes`
/// [rows, k/2] (the even k in each byte's low nibble) and `scales`
/// [rows, k/32]: fromE2M1 x fromE8M0, in fp32 (infinite beyond its range).
std::vector<float> decodeMxfp4(int64_t rows, int64_t k, const uint8_t *codes,
                               const uint8_t *scales);

/// Quantizes finite `values` [rows, k] (k a multiple of kMxBlockSize) to
/// MXFP4 as gpt-oss's checkpoints are made: each block's scale the least
/// power of two 2^e (e in [-127, 127]) with amax / 2^e <= 6, each code the
/// nearest e2m1 value of value / 2^e, ties to the even code, the sign kept.
/// Fills `codes` [rows, k/2] (the even k in the low nibble) and `scales`
/// [rows, k/32] (e + 127).
void quantizeMxfp4(int64_t rows, int64_t k, const float *values, uint8_t *codes,
                   uint8_t *scales);

//===----------------------------------------------------------------------===//
// Dynamic quantization
//===----------------------------------------------------------------------===//

/// Quantizes the rows of `x` [rows, k] to e4m3 with one fp32 scale per row
/// and group of `groupSize` columns (> 0; k for one scale per token): group
/// g of row m is columns [g*G, min(g*G + G, k)). In fp32:
///   amax = max |x| over the group, NaN if any element is NaN;
///   scale[m][g] = max(amax, 1e-10f) / 448 (NaN stays NaN);
///   q[m][c] = toE4M3(x[m][c] / scale[m][g]), the division correctly rounded.
/// q is [rows, k] codes, scales [rows, ceil(k / G)]. Callers round bf16
/// values to bf16 before (x holds what the tensor stores).
void quantizeE4M3(int64_t rows, int64_t k, int64_t groupSize, const float *x,
                  uint8_t *q, float *scales);

//===----------------------------------------------------------------------===//
// Static quantization
//===----------------------------------------------------------------------===//

/// Quantizes the rows of `x` [rows, k] to e4m3 by a given `scale` (a
/// checkpoint's static per-tensor input scale), as moe.quantize with
/// scale(%s): q[m][c] = toE4M3(x[m][c] / scale), the division correctly
/// rounded, without an amax or a floor (quotients beyond +-448 saturate; a
/// NaN x, or 0 / 0 when the scale is 0, gives 0x7F), and every scale of
/// `scales` [rows, ceil(k / groupSize)] is `scale`.
void quantizeE4M3Static(int64_t rows, int64_t k, int64_t groupSize, float scale,
                        const float *x, uint8_t *q, float *scales);

/// The static scales of a layer's two GEMM inputs (#moe.quantization's
/// static_tensor activations; checkpoints' w13_input_scale and
/// w2_input_scale): the hidden rows are quantized by `w13`, the activations
/// by `w2`, with quantizeE4M3Static.
struct StaticInputScales {
  float w13, w2;
};

//===----------------------------------------------------------------------===//
// Scaled matmuls
//===----------------------------------------------------------------------===//

/// How e4m3 weights [E, N, K] and the activation rows multiplied with them
/// are scaled. With B the block size:
///   - Block (DeepSeek-V3 / Kimi-K2 checkpoints): weight scales
///     [E, ceil(N/B), ceil(K/B)], activation scales [rows, ceil(K/B)];
///   - Channel: weight scales [E, N], activation scales [rows, 1];
///   - Tensor: weight scales [E], activation scales [rows, 1].
/// Activation scales are dynamic, or with Channel and Tensor static
/// (StaticInputScales), the same [rows, 1] layout holding the given scale.
/// Numbered as #moe.quantization's `weights` (and the C entry points'
/// `scaling`).
enum class Fp8Scaling { Tensor = 0, Channel = 1, Block = 2 };

/// A scaling scheme and, for Block, its block size B (128 in checkpoints;
/// any positive value).
struct Fp8Scheme {
  Fp8Scaling scaling = Fp8Scaling::Block;
  int64_t blockSize = 128;

  /// The columns of a row sharing one activation scale: B for Block, else
  /// all k.
  int64_t groupSize(int64_t k) const;
  /// The number of activation scales of a row of k columns.
  int64_t numGroups(int64_t k) const;
};

/// moe.grouped_matmul on e4m3 operands: the rows, gated activation, routed
/// weight and rounding of groupedMatmul (Reference.h), with each h[n] of an
/// input row `row` routed to expert e, for the products
/// p_k = fromE4M3(input[row][k]) * fromE4M3(weights[e][n][k]):
///   - Block: acc = 0, then for each K block kb in order
///     acc += partial_kb * (a_s[row][kb] * w_s[e][n/B][kb]), partial_kb the
///     fp32 sum of p_k over the block's k in order; h[n] = acc;
///   - Channel: h[n] = (fp32 sum of p_k over all k in order)
///     * (a_s[row][0] * w_s[e][n]);
///   - Tensor: h[n] = (the same sum) * (a_s[row][0] * w_s[e]).
/// `input` is [T, K] (tokenOrder) or [C, K] codes, `inputScales` a_s its
/// rows' scales, `weights` [E, N, K] codes, `weightScales` w_s shaped as
/// Fp8Scaling says; `bias` [E, N] (or nullptr) is added to the scaled h.
void scaledGroupedMatmul(const Fp8Scheme &scheme, const Routing &routing,
                         int64_t numTokens, int64_t numSlots, int64_t blockM,
                         int64_t n, int64_t k, const uint8_t *input,
                         const float *inputScales, bool tokenOrder,
                         const uint8_t *weights, const float *weightScales,
                         const float *routedWeights,
                         const GatedActivation &activation, bool sortedOutput,
                         float *output, const RoundFn &round,
                         const float *bias = nullptr);

/// The experts of a layer on e4m3 weights, token by token: fusedExperts
/// (Reference.h; its slots, routed weights and rounding) with each fp32
/// matmul replaced by a scaled one. For each token, its hidden row rounded
/// by `round` is quantized (quantizeE4M3, group size scheme.groupSize(H));
/// for each slot whose id e is in [0, numExperts), h = the scaled product of
/// that row with w13[e], a[j] = round(act(h[j]) * h[j + I]), a is quantized
/// (group size scheme.groupSize(I)), and y += round(weight * (the scaled
/// product of a with w2[e])); the output is round(y). With `inputScales`
/// the two quantizations are quantizeE4M3Static by its scales instead
/// (nullptr: dynamic); `biases` are added to the scaled products as
/// fusedExperts adds them. hidden [T, H], ids and slotWeights [T, numSlots],
/// w13 [numExperts, 2I, H] codes, w2 [numExperts, H, I] codes, their scales
/// shaped as Fp8Scaling says (N = 2I, K = H for w13; N = H, K = I for w2),
/// output [T, H].
void fusedExpertsFp8(const Fp8Scheme &scheme, const GatedActivation &activation,
                     int64_t numTokens, int64_t hiddenSize, int64_t numExperts,
                     int64_t intermediate, int64_t numSlots,
                     const float *hidden, const int32_t *ids,
                     const float *slotWeights, const uint8_t *w13,
                     const float *w13Scales, const uint8_t *w2,
                     const float *w2Scales,
                     const StaticInputScales *inputScales, float *output,
                     const RoundFn &round, const ExpertBiases &biases = {});

/// The static input scales a calibration of the experts of fusedExpertsFp8
/// on `hidden` finds, as checkpoints' input_scale are made: for each GEMM
/// input, the dynamic per-tensor scale max(amax, 1e-10) / 448 of its values
/// over all tokens (amax NaN if any value is), the hidden rows rounded by
/// `round`, and the activations a of every slot whose id is in range, which
/// the first GEMM computes from the rows quantized dynamically.
StaticInputScales calibrateInputScales(const Fp8Scheme &scheme,
                                       const GatedActivation &activation,
                                       int64_t numTokens, int64_t hiddenSize,
                                       int64_t numExperts, int64_t intermediate,
                                       int64_t numSlots, const float *hidden,
                                       const int32_t *ids, const uint8_t *w13,
                                       const float *w13Scales,
                                       const RoundFn &round);

/// The whole layer on e4m3 weights, as fusedMoe: gate, then fusedExpertsFp8
/// over the E+X stored experts. hidden [T, H], logits [T, E], bias [E] or
/// nullptr, w13 [E+X, 2I, H] and w2 [E+X, H, I] codes with their scales,
/// `inputScales` the static input scales or nullptr.
void fusedMoeFp8(const Router &router, const Fp8Scheme &scheme,
                 const GatedActivation &activation, int64_t numTokens,
                 int64_t hiddenSize, int64_t numExperts, int64_t intermediate,
                 const float *hidden, const float *logits, const float *bias,
                 const uint8_t *w13, const float *w13Scales, const uint8_t *w2,
                 const float *w2Scales, const StaticInputScales *inputScales,
                 float *output, const RoundFn &round);

} // namespace reference
} // namespace moe
} // namespace mlir

#endif // MOE_REFERENCE_QUANTIZATION_H
