//===- Pipelines.h - moe pass pipelines -------------------------*- C++ -*-===//

#ifndef MOE_PIPELINES_PIPELINES_H
#define MOE_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"

namespace mlir {
namespace moe {

/// Lowers a module of moe ops on tensors (functions with tensor arguments and
/// results) to the LLVM dialect through the CPU loops: moe-decompose,
/// convert-moe-to-loops, one-shot bufferization across function boundaries,
/// buffer deallocation, then the standard conversions to LLVM. The result
/// runs through mlir::ExecutionEngine; functions that should be callable from
/// C++ need `llvm.emit_c_interface`.
void buildMoeCpuPipeline(OpPassManager &pm);

/// Registers `moe-cpu-pipeline` with the pass registry.
void registerMoePipelines();

} // namespace moe
} // namespace mlir

#endif // MOE_PIPELINES_PIPELINES_H
