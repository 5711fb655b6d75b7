//===- GemmHeuristic.h - Default tile configurations ------------*- C++ -*-===//
//
// The configuration a grouped matmul gets when neither its IR nor a tuning
// database gives one: shared by moe-tile and by convert-moe-to-gpu for ops
// that reach it untiled.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_GEMMHEURISTIC_H
#define MOE_DIALECT_MOE_TRANSFORMS_GEMMHEURISTIC_H

#include "moe/Dialect/Moe/IR/MoeOps.h"

namespace mlir {
namespace moe {

/// The heuristic #moe.gemm_config of `op` for `tokens` tokens.
GemmConfigAttr chooseGemmConfig(GroupedMatmulOp op, int64_t tokens);

} // namespace moe
} // namespace mlir

#endif // MOE_DIALECT_MOE_TRANSFORMS_GEMMHEURISTIC_H
