//===- ExpertGemms.h - The two grouped matmuls of a layer's experts -*- C++
//-*-//
//
// Shared by moe-decompose, which routes a layer's tokens with moe.route, and
// moe-expert-parallel, which routes a rank's received rows with moe.ep_route:
// both then run the same GEMMs, so that the two layers compute each row
// alike.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_EXPERTGEMMS_H
#define MOE_DIALECT_MOE_TRANSFORMS_EXPERTGEMMS_H

#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "mlir/IR/IRMapping.h"

namespace mlir {
namespace moe {

/// A layer's expert MLP: its weights, their biases (both or neither), their
/// quantization with the weights' scales and the static scales of the two
/// GEMMs' inputs (static_tensor activations), and its activation.
struct ExpertMlp {
  Value w13, w2, w13Bias, w2Bias, w13Scales, w2Scales, w13InputScale,
      w2InputScale;
  QuantizationAttr quantization;
  Activation activation;
  SwigluAttr swiglu;

  /// The expert MLP of `op`, a moe.fused_moe or moe.fused_experts.
  template <typename LayerOp> static ExpertMlp of(LayerOp op) {
    return {
        op.getW13(),           op.getW2(),           op.getW13Bias(),
        op.getW2Bias(),        op.getW13Scales(),    op.getW2Scales(),
        op.getW13InputScale(), op.getW2InputScale(), op.getQuantizationAttr(),
        op.getActivation(),    op.getSwigluAttr()};
  }

  /// The MLP's values that are present, in the layer's operand order.
  SmallVector<Value> getValues() const {
    SmallVector<Value> values;
    for (Value value : {w13, w2, w13Bias, w2Bias, w13Scales, w2Scales,
                        w13InputScale, w2InputScale})
      if (value)
        values.push_back(value);
    return values;
  }

  /// This MLP with each value replaced by its image in `mapping`.
  ExpertMlp lookup(const IRMapping &mapping) const {
    ExpertMlp mapped = *this;
    for (Value *value : {&mapped.w13, &mapped.w2, &mapped.w13Bias,
                         &mapped.w2Bias, &mapped.w13Scales, &mapped.w2Scales,
                         &mapped.w13InputScale, &mapped.w2InputScale})
      *value = mapping.lookupOrNull(*value);
    return mapped;
  }
};

/// Rows routed to experts, as moe.route's results give them.
struct RoutedRows {
  Value sortedIds, expertIds, numPadded;
  int64_t blockM, numSlots;
};

/// Builds grouped_matmul(w13, activation) -> grouped_matmul(w2, routed
/// weights) over the token rows `hidden` [T, H] routed by `routing`, each
/// GEMM's input quantized first for fp8 weights, and returns the weighted
/// rows [T, S, H] in slot order.
Value buildExpertGemms(OpBuilder &builder, Location loc, Value hidden,
                       Value routedWeights, const RoutedRows &routing,
                       const ExpertMlp &mlp);

} // namespace moe
} // namespace mlir

#endif // MOE_DIALECT_MOE_TRANSFORMS_EXPERTGEMMS_H
