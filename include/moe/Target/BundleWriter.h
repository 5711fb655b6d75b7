//===- BundleWriter.h - Compile a layer to a kernel bundle ------*- C++ -*-===//
//
// The last IR level: kernels lowered through NVVM to a cubin (and PTX), and
// the launch plan that convert-moe-to-gpu recorded, written as a bundle
// directory in the format of docs/BUNDLE.md.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_BUNDLEWRITER_H
#define MOE_TARGET_BUNDLEWRITER_H

#include "moe/Pipelines/Pipelines.h"
#include "moe/Target/DefaultTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir {
namespace moe {

struct BundleOptions {
  /// What the kernels are built for (moe-gpu-pipeline's options).
  MoeGpuPipelineOptions pipeline;
  /// CUDA toolkit for ptxas and libdevice; without ptxas only PTX is written
  /// and the driver JIT-compiles it at load.
  std::string toolkit = kDefaultCudaToolkit;
};

/// Compiles the layer function of `module` (a moe.fused_moe or primitive moe
/// ops on tensors) through moe-gpu-pipeline, reading the launch plan off the
/// kernel module between its two halves, serializes the kernels
/// (gpu-module-to-binary) and writes the bundle into `directory`, creating
/// it. `module` is transformed in place.
llvm::Error compileBundle(ModuleOp module, const BundleOptions &options,
                          llvm::StringRef directory);

} // namespace moe
} // namespace mlir

#endif // MOE_TARGET_BUNDLEWRITER_H
