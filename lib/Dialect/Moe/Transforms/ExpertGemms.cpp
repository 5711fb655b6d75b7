//===- ExpertGemms.cpp - The two grouped matmuls of a layer's experts -----===//

#include "ExpertGemms.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
/// A GEMM's input rows and, for fp8 weights, their scales.
struct GemmInput {
  Value rows, scales;
};
} // namespace

/// The input rows [M, K] of a GEMM: as they are (float weights, or
/// weight-only MXFP4), or quantized as `quantization` says for fp8 weights
/// (only the first `numRows` rows when given), by the given `staticScale`
/// for static_tensor activations.
static GemmInput quantizeRows(OpBuilder &builder, Location loc, Value rows,
                              Value numRows, Value staticScale,
                              QuantizationAttr quantization) {
  if (!quantization || quantization.isWeightOnly())
    return {rows, Value()};
  auto type = cast<RankedTensorType>(rows.getType());
  int64_t k = type.getDimSize(1);
  int64_t groupSize = quantization.getActivationGroupSize(k);
  auto quantize = QuantizeOp::create(
      builder, loc,
      RankedTensorType::get(type.getShape(),
                            builder.getType<Float8E4M3FNType>()),
      RankedTensorType::get(
          {type.getDimSize(0), llvm::divideCeilSigned(k, groupSize)},
          builder.getF32Type()),
      rows, staticScale, numRows, groupSize);
  return {quantize.getOutput(), quantize.getScales()};
}

Value mlir::moe::buildExpertGemms(OpBuilder &builder, Location loc,
                                  Value hidden, Value routedWeights,
                                  const RoutedRows &routing,
                                  const ExpertMlp &mlp) {
  auto hiddenType = cast<RankedTensorType>(hidden.getType());
  Type elementType = hiddenType.getElementType();
  int64_t numTokens = hiddenType.getDimSize(0);
  int64_t hiddenSize = hiddenType.getDimSize(1);
  int64_t intermediate =
      cast<RankedTensorType>(mlp.w13.getType()).getDimSize(1) / 2;
  int64_t capacity =
      cast<RankedTensorType>(routing.sortedIds.getType()).getDimSize(0);

  // FP8: the hidden states, and the activation's output as the first GEMM
  // stores it (padded rows only), quantized for the GEMM that reads them.
  QuantizationAttr quantization = mlp.quantization;
  GemmInput input = quantizeRows(builder, loc, hidden, /*numRows=*/Value(),
                                 mlp.w13InputScale, quantization);
  auto gateUp = GroupedMatmulOp::create(
      builder, loc,
      RankedTensorType::get({capacity, intermediate}, elementType), input.rows,
      mlp.w13, routing.sortedIds, routing.expertIds, routing.numPadded,
      /*routed_weights=*/Value(), mlp.w13Bias, input.scales, mlp.w13Scales,
      /*input_map=*/Value(), /*weights_map=*/Value(), routing.blockM,
      routing.numSlots, RowOrder::token, RowOrder::sorted, mlp.activation,
      mlp.swiglu, /*config=*/GemmConfigAttr(), quantization);
  GemmInput activated =
      quantizeRows(builder, loc, gateUp.getOutput(), routing.numPadded,
                   mlp.w2InputScale, quantization);
  return GroupedMatmulOp::create(
             builder, loc,
             RankedTensorType::get({numTokens, routing.numSlots, hiddenSize},
                                   elementType),
             activated.rows, mlp.w2, routing.sortedIds, routing.expertIds,
             routing.numPadded, routedWeights, mlp.w2Bias, activated.scales,
             mlp.w2Scales, /*input_map=*/Value(), /*weights_map=*/Value(),
             routing.blockM, routing.numSlots, RowOrder::sorted, RowOrder::slot,
             Activation::none,
             /*swiglu=*/SwigluAttr(), /*config=*/GemmConfigAttr(), quantization)
      .getOutput();
}
