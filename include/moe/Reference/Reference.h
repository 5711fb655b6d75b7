//===- Reference.h - Plain C++ reference of the moe ops ---------*- C++ -*-===//
//
// An independent, deliberately simple implementation of the semantics of the
// moe ops (DESIGN.md section 2 and the op descriptions in MoeOps.td), written
// apart from the MLIR lowering so that each checks the other. fp32 only: the
// callers convert bf16/fp16 data to float first and round where the op
// semantics store an intermediate in a narrower type.
//
// No MLIR or LLVM headers: plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_REFERENCE_REFERENCE_H
#define MOE_REFERENCE_REFERENCE_H

#include <cstdint>
#include <functional>
#include <vector>

namespace mlir {
namespace moe {
namespace reference {

enum class Scoring { Softmax, Sigmoid };
enum class Activation { None, SiluAndMul, GeluAndMul, ClampedSwiglu };

/// A gated activation with its parameters: ClampedSwiglu's alpha and limit
/// (#moe.swiglu); the others take none, and convert implicitly.
struct GatedActivation {
  GatedActivation(Activation kind) : kind(kind) {}
  /// gpt-oss's activation of (gate, up): gate = min(gate, limit), up =
  /// clamp(up, -limit, limit), (up + 1) * gate / (1 + exp(-alpha gate)).
  static GatedActivation clampedSwiglu(float alpha, float limit) {
    GatedActivation activation(Activation::ClampedSwiglu);
    activation.alpha = alpha;
    activation.limit = limit;
    return activation;
  }

  Activation kind;
  float alpha = 0.0f, limit = 0.0f;
};

/// The expert biases of a layer (moe.fused_moe's `biases`), or null:
/// w13 [E, 2I] added to each first-GEMM sum, w2 [E, H] to each second.
struct ExpertBiases {
  const float *w13 = nullptr;
  const float *w2 = nullptr;
};

/// The routing rules of #moe.router.
struct Router {
  Scoring scoring = Scoring::Softmax;
  int64_t topK = 1;
  int64_t numGroups = 1;
  int64_t topkGroups = 1;
  bool renormalize = false;
  float routedScalingFactor = 1.0f;
  int64_t numSharedExperts = 0;

  int64_t numSlots() const { return topK + numSharedExperts; }
};

/// moe.gate: logits [T, E] (and bias [E] or nullptr) -> weights [T, S] and
/// ids [T, S], S = topK + numSharedExperts.
void gate(const Router &router, int64_t numTokens, int64_t numExperts,
          const float *logits, const float *bias, float *weights, int32_t *ids);

/// The result of moe.route.
struct Routing {
  std::vector<int32_t> sortedIds; // [C], sentinel T*S past each expert's slots
  std::vector<int32_t> expertIds; // [ceil(C / blockM)], -1 past the end
  int32_t numPadded = 0;
};

/// The static capacity T*S + E*(blockM - 1).
int64_t routeCapacity(int64_t numTokens, int64_t numSlots, int64_t numExperts,
                      int64_t blockM);

/// moe.route: ids [T, S] -> sorted slots, per-block experts, padded count.
/// Ids outside [0, numExperts) are dropped (get no row).
Routing route(int64_t numTokens, int64_t numSlots, const int32_t *ids,
              int64_t numExperts, int64_t blockM);

/// Rounds a float to the storage type of an intermediate (identity for
/// fp32); supplied by the caller, which knows the element type.
using RoundFn = std::function<float(float)>;

/// The products of one input row with one expert's weights, before
/// moe.grouped_matmul's epilogue: fills h [N]. `row` indexes the input (a
/// token with tokenOrder, else a sorted row).
using RowProductFn = std::function<void(int64_t row, int64_t expert, float *h)>;

/// moe.grouped_matmul's rows and epilogue around the products `product`
/// computes: for each routed row, h = product(row, expert) plus the
/// expert's `bias` [E, N] row when given, then the gated activation of
/// (h[j], h[j + N/2]) in fp32, the routed weight, and the stored element
/// rounded by `round`, in sorted or slot order. The one place these
/// semantics live, shared by the fp32 and the FP8 matmuls.
void groupedMatmul(const Routing &routing, int64_t numTokens, int64_t numSlots,
                   int64_t blockM, int64_t n, bool tokenOrder,
                   const RowProductFn &product, const float *routedWeights,
                   const GatedActivation &activation, bool sortedOutput,
                   float *output, const RoundFn &round,
                   const float *bias = nullptr);

/// moe.grouped_matmul with fp32 accumulation. `input` is [T, K] (tokenOrder)
/// or [C, K]; `weights` [E, N, K]; `routedWeights` [T, S] or nullptr. The
/// output is [C, N'] (sortedOutput) or [T, S, N'] with N' = N / 2 for a
/// gated activation; rows that receive nothing are left untouched. `round`
/// is applied to each stored element; `bias` [E, N] or nullptr.
void groupedMatmul(const Routing &routing, int64_t numTokens, int64_t numSlots,
                   int64_t blockM, int64_t n, int64_t k, const float *input,
                   bool tokenOrder, const float *weights,
                   const float *routedWeights,
                   const GatedActivation &activation, bool sortedOutput,
                   float *output, const RoundFn &round,
                   const float *bias = nullptr);

/// moe.combine: rows [T, S, H] (and weights [T, S] or nullptr) -> [T, H].
void combine(int64_t numTokens, int64_t numSlots, int64_t hiddenSize,
             const float *rows, const float *weights, float *output,
             const RoundFn &round);

/// The experts of a layer given its routing (moe.fused_experts) computed
/// token by token: for each token and each slot whose id e is in
/// [0, numExperts), h = x . w13[e]^T (+ biases.w13[e]), a = act(h[:I],
/// h[I:]), y += weight * (a . w2[e]^T (+ biases.w2[e])). `round` models the
/// element type of the stored intermediates (a, the slot rows, and y).
/// hidden [T, H], ids and slotWeights [T, numSlots], w13 [numExperts, 2I,
/// H], w2 [numExperts, H, I], output [T, H].
void fusedExperts(const GatedActivation &activation, int64_t numTokens,
                  int64_t hiddenSize, int64_t numExperts, int64_t intermediate,
                  int64_t numSlots, const float *hidden, const int32_t *ids,
                  const float *slotWeights, const float *w13, const float *w2,
                  float *output, const RoundFn &round,
                  const ExpertBiases &biases = {});

/// The two products of a token's slot in fusedExperts.
struct ExpertProducts {
  /// Fills h [2I] with token `token`'s hidden row times w13[expert]^T.
  std::function<void(int64_t token, int64_t expert, float *h)> up;
  /// Fills y [H] with the stored intermediate a [I] times w2[expert]^T.
  std::function<void(int64_t expert, const float *a, float *y)> down;
};

/// fusedExperts around the products `products` computes: for each token and
/// each slot whose id e is in [0, numExperts), h = up(token, e) + the
/// expert's w13 bias, a = round(act(h[:I], h[I:])), y += round(weight *
/// (down(e, a) + the expert's w2 bias)), and the output round(y). The one
/// place these semantics live, shared by the fp32 and the FP8 experts.
void fusedExperts(const GatedActivation &activation, int64_t numTokens,
                  int64_t hiddenSize, int64_t numExperts, int64_t intermediate,
                  int64_t numSlots, const int32_t *ids,
                  const float *slotWeights, const ExpertProducts &products,
                  float *output, const RoundFn &round,
                  const ExpertBiases &biases = {});

/// The whole layer (moe.fused_moe) computed token by token, without the
/// route/grouped_matmul machinery: gate, then fusedExperts over the E+X
/// stored experts. hidden [T, H], logits [T, E], bias [E] or nullptr,
/// w13 [E+X, 2I, H], w2 [E+X, H, I], output [T, H], `experts` the expert
/// biases.
void fusedMoe(const Router &router, const GatedActivation &activation,
              int64_t numTokens, int64_t hiddenSize, int64_t numExperts,
              int64_t intermediate, const float *hidden, const float *logits,
              const float *bias, const float *w13, const float *w2,
              float *output, const RoundFn &round,
              const ExpertBiases &experts = {});

} // namespace reference
} // namespace moe
} // namespace mlir

#endif // MOE_REFERENCE_REFERENCE_H
