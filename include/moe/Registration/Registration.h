//===- Registration.h - What the moe tools register -------------*- C++ -*-===//

#ifndef MOE_REGISTRATION_REGISTRATION_H
#define MOE_REGISTRATION_REGISTRATION_H

namespace mlir {
class DialectRegistry;

namespace moe {

/// Adds the moe dialect and every upstream dialect with the extensions the
/// CPU and GPU lowerings need: bufferization and deallocation models,
/// convert-to-llvm interfaces, the NVVM target attribute, and the LLVM IR
/// translations that gpu-module-to-binary and the ExecutionEngine use.
void registerMoeDialects(DialectRegistry &registry);

/// Registers the moe passes and pipelines and the upstream passes with the
/// global pass registry (for textual pipelines and moe-opt).
void registerMoePasses();

} // namespace moe
} // namespace mlir

#endif // MOE_REGISTRATION_REGISTRATION_H
