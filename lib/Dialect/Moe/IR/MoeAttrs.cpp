//===- MoeAttrs.cpp - moe enums and attributes ----------------------------===//

#include "moe/Dialect/Moe/IR/MoeAttrs.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/Moe/IR/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/Moe/IR/MoeAttrs.cpp.inc"

void MoeDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/Dialect/Moe/IR/MoeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RouterAttr
//===----------------------------------------------------------------------===//

LogicalResult RouterAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 Scoring scoring, int64_t topK,
                                 int64_t numGroups, int64_t topkGroups,
                                 bool renormalize, APFloat routedScalingFactor,
                                 int64_t numSharedExperts) {
  if (topK < 1)
    return emitError() << "top_k must be at least 1, got " << topK;
  if (numGroups < 1)
    return emitError() << "num_groups must be at least 1, got " << numGroups;
  if (topkGroups < 1 || topkGroups > numGroups)
    return emitError() << "topk_groups must be in [1, num_groups = "
                       << numGroups << "], got " << topkGroups;
  if (!routedScalingFactor.isFiniteNonZero() ||
      routedScalingFactor.isNegative())
    return emitError() << "routed_scaling_factor must be finite and positive, "
                          "got "
                       << routedScalingFactor.convertToDouble();
  if (numSharedExperts < 0)
    return emitError() << "num_shared_experts must be non-negative, got "
                       << numSharedExperts;
  return success();
}

LogicalResult
RouterAttr::verifyForExperts(function_ref<InFlightDiagnostic()> emitError,
                             int64_t numExperts) const {
  int64_t numGroups = getNumGroups();
  if (numExperts % numGroups != 0)
    return emitError() << "num_groups (" << numGroups
                       << ") must divide the expert count (" << numExperts
                       << ")";
  int64_t groupSize = numExperts / numGroups;
  // A group scores the sum of its two best experts, so it needs two.
  if (numGroups > 1 && groupSize < 2)
    return emitError() << "grouped routing needs at least 2 experts per "
                          "group, got "
                       << groupSize;
  int64_t eligible = groupSize * getTopkGroups();
  if (getTopK() > eligible)
    return emitError() << "top_k (" << getTopK() << ") exceeds the " << eligible
                       << " experts of the topk_groups (" << getTopkGroups()
                       << ") chosen groups";
  return success();
}

//===----------------------------------------------------------------------===//
// GemmConfigAttr
//===----------------------------------------------------------------------===//

LogicalResult
GemmConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t blockM, int64_t blockN, int64_t blockK,
                       int64_t numStages, int64_t numWarpgroups, int64_t splitK,
                       bool tmaA, bool tmaB, int64_t clusterM, int64_t clusterN,
                       bool persistent, bool warpSpecialized) {
  auto isPow2In = [](int64_t v, int64_t lo, int64_t hi) {
    return v >= lo && v <= hi && llvm::isPowerOf2_64(v);
  };
  if (!isPow2In(blockM, 16, 256))
    return emitError() << "block_m must be a power of two in [16, 256], got "
                       << blockM;
  // wgmma takes N in multiples of 8; 16 keeps bf16/fp16 rows 32-byte sized.
  if (blockN < 16 || blockN > 256 || blockN % 16 != 0)
    return emitError() << "block_n must be a multiple of 16 in [16, 256], got "
                       << blockN;
  if (!isPow2In(blockK, 16, 256))
    return emitError() << "block_k must be a power of two in [16, 256], got "
                       << blockK;
  if (numStages < 1 || numStages > 8)
    return emitError() << "num_stages must be in [1, 8], got " << numStages;
  if (numWarpgroups < 1 || numWarpgroups > 4)
    return emitError() << "num_warpgroups must be in [1, 4], got "
                       << numWarpgroups;
  if (splitK < 1)
    return emitError() << "split_k must be at least 1, got " << splitK;
  if (!isPow2In(clusterM, 1, 8) || !isPow2In(clusterN, 1, 8) ||
      clusterM * clusterN > 8)
    return emitError() << "cluster " << clusterM << "x" << clusterN
                       << " must have power-of-two sides and at most 8 "
                          "blocks (the portable cluster size)";
  return success();
}
