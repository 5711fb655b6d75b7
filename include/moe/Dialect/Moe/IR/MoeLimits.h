//===- MoeLimits.h - The largest sizes a moe layer may have -----*- C++ -*-===//
//
// The one place the bounds on a layer's sizes live. The verifiers, the
// passes' options, the tools and the Python package check against them, so
// that every size derived from them fits the type that holds it: the kernels
// keep token counts, slot ids (t * S + s) and routed rows in 32-bit integers
// and byte offsets in 64 bits, the GPU gate unrolls over the router's groups
// and slots, and the split-K reduction over the splits.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_IR_MOELIMITS_H
#define MOE_DIALECT_MOE_IR_MOELIMITS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpDefinition.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace mlir {
namespace moe {

/// The largest size (2^31 - 1, what an i32 holds): of a static dimension of
/// a moe op's tensors, of a size attribute, of a token count (a dynamic T,
/// the passes' `tokens` and `tokens-max`), and of the routing capacity
/// T*S + E*(block_m - 1).
inline constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

/// The most router groups (`num_groups`): the GPU gate ranks the groups in
/// num_groups x topk_groups unrolled steps (1024 experts in 512 groups made
/// millions of ops).
inline constexpr int64_t kMaxRouterGroups = 64;

/// The most slots a router fills per token (top_k + num_shared_experts): the
/// GPU gate unrolls its top_k selection rounds and its slot stores.
inline constexpr int64_t kMaxRouterSlots = 1024;

/// The most K splits of a grouped matmul: the split-K reduction sums a
/// slot's splits unrolled.
inline constexpr int64_t kMaxSplitK = 64;

/// The most multiprocessors a target may have (`num-sms`): more than any
/// GPU has, few enough that grids sized for them stay small.
inline constexpr int64_t kMaxMultiprocessors = 1024;

/// The bytes of a tensor of `type`, each dynamic dimension counted as
/// kMaxSize tokens; none when that overflows int64.
std::optional<int64_t> getMaxTensorBytes(RankedTensorType type);

/// The rows of the routing of `tokens` tokens of `slots` slots each over
/// `experts` experts padded to `blockM`-row blocks, T*S + E*(block_m - 1);
/// none when a size is negative or the rows exceed kMaxSize.
std::optional<int64_t> getRoutingCapacity(int64_t tokens, int64_t slots,
                                          int64_t experts, int64_t blockM);

/// Says, when getRoutingCapacity has no capacity for these sizes, how many
/// rows they route and that this is too many: "T*S + E*(block_m-1) = ...
/// routed rows exceed 2147483647 (...)"; none when they fit.
std::optional<std::string> describeRoutingOverflow(int64_t tokens,
                                                   int64_t slots,
                                                   int64_t experts,
                                                   int64_t blockM);

/// Checks getRoutingCapacity; else emits that `cause` (the option or
/// attribute that made it too large, e.g. "tokens-max = 65536") gives more
/// routed rows than the kernels' i32 slot ids and rows address.
LogicalResult
verifyRoutingCapacity(function_ref<InFlightDiagnostic()> emitError,
                      const Twine &cause, int64_t tokens, int64_t slots,
                      int64_t experts, int64_t blockM);

/// Says what is wrong with the size option `name` (as its tool or API
/// spells it: "--tokens", "tokens-max", "tokens_max") of value `value`,
/// which must lie in [least, most]; none when nothing is.
std::optional<std::string> checkSizeOption(StringRef name, int64_t value,
                                           int64_t least,
                                           int64_t most = kMaxSize);

/// A pass's size option and the range it must lie in.
struct SizeOption {
  StringRef name;
  int64_t value;
  int64_t least = 1;
  int64_t most = kMaxSize;
};

/// Checks each of a pass's size `options` (checkSizeOption), emitting on
/// `op` what is wrong with the first out of range, prefixed by `pass`.
LogicalResult checkSizeOptions(Operation *op, StringRef pass,
                               ArrayRef<SizeOption> options);

/// Checks that every ranked tensor `op` takes or gives has static
/// dimensions in [1, kMaxSize] and fits getMaxTensorBytes.
LogicalResult verifyBoundedTensorSizes(Operation *op);

namespace OpTrait {
/// The trait of every moe op: its tensors are bounded as
/// verifyBoundedTensorSizes says, so that its verifier and lowerings can
/// multiply two sizes without overflow.
template <typename ConcreteType>
class BoundedTensorSizes
    : public ::mlir::OpTrait::TraitBase<ConcreteType, BoundedTensorSizes> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return verifyBoundedTensorSizes(op);
  }
};
} // namespace OpTrait

} // namespace moe
} // namespace mlir

#endif // MOE_DIALECT_MOE_IR_MOELIMITS_H
