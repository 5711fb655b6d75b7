//===- MoeToLoops.h - moe ops to loops over buffers -------------*- C++ -*-===//

#ifndef MOE_CONVERSION_MOETOLOOPS_MOETOLOOPS_H
#define MOE_CONVERSION_MOETOLOOPS_MOETOLOOPS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;

namespace moe {

#define GEN_PASS_DECL_CONVERTMOETOLOOPS
#include "moe/Conversion/Passes.h.inc"

/// Adds the patterns that lower moe.gate, moe.route, moe.grouped_matmul and
/// moe.combine to loops.
void populateMoeToLoopsPatterns(RewritePatternSet &patterns);

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_MOETOLOOPS_MOETOLOOPS_H
