//===- Passes.h - moe conversion passes -------------------------*- C++ -*-===//

#ifndef MOE_CONVERSION_PASSES_H
#define MOE_CONVERSION_PASSES_H

#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "moe/Conversion/MoeToLoops/MoeToLoops.h"

#include "mlir/Pass/Pass.h"

namespace mlir {
namespace moe {

#define GEN_PASS_REGISTRATION
#include "moe/Conversion/Passes.h.inc"

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_PASSES_H
