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
  /// The token counts the bundle's variants make their choices for, rising
  /// to tokens-max (which is added when missing); empty: 1, 2, 3, 4, 6, 8,
  /// 12, ... (powers of two and 1.5 times them). Neighbours whose kernels
  /// come out the same are one variant. `{tokens-max}`: one variant, as a
  /// bundle for tokens-max alone.
  SmallVector<int64_t> tokenBuckets;
};

/// Compiles the layer function of `module` (a moe.fused_moe or primitive moe
/// ops on tensors) into a bundle with a variant per range of token counts:
/// the moe half of moe-gpu-pipeline runs on a copy of `module` for each of
/// the options' token buckets, each variant's launch plan is read off its
/// kernel module, the kernels of all variants are lowered (the second half)
/// and serialized together (gpu-module-to-binary), and the bundle is written
/// as `directory` whole or not at all: into a fresh directory beside it,
/// then renamed into place (replacing an empty directory or a bundle, never
/// anything else), so that a failure leaves `directory` as it was and a
/// loader never sees the files of two bundles. `module` is left as it was.
llvm::Error compileBundle(ModuleOp module, const BundleOptions &options,
                          llvm::StringRef directory);

} // namespace moe
} // namespace mlir

#endif // MOE_TARGET_BUNDLEWRITER_H
