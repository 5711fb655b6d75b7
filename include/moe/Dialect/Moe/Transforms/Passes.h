//===- Passes.h - moe dialect transformations -------------------*- C++ -*-===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_H
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_H

#include "moe/Dialect/Moe/IR/MoeDialect.h"
#include "moe/Target/DefaultTarget.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace moe {

#define GEN_PASS_DECL
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moe/Dialect/Moe/Transforms/Passes.h.inc"

} // namespace moe
} // namespace mlir

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_H
