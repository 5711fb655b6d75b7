//===- Bundle.h - Compile a layer to a kernel bundle ------------*- C++ -*-===//
//
// The last IR level: kernels lowered through NVVM to a cubin (and PTX), and
// the launch plan that convert-moe-to-gpu recorded, written as a bundle
// directory in the format of docs/BUNDLE.md.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_BUNDLE_H
#define MOE_TARGET_BUNDLE_H

#include "moe/Target/DefaultTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir {
namespace moe {

struct BundleOptions {
  int64_t tokensMax = 16384;
  /// Rows per routing block; 0: chosen for tokensMax (moe-decompose).
  int64_t blockM = 0;
  /// Overrides of moe-tile's heuristic (0: the heuristic's choice).
  int64_t blockN = 0;
  int64_t numStages = 0;
  /// A tuned config database consulted before the shipped entries (empty:
  /// the shipped ones only), and the device its entries are looked up for.
  std::string configDatabase;
  std::string device = kDefaultDeviceName;
  /// Multiprocessors of the target GPU: what moe-split-k fills and what
  /// persistent grids are sized for.
  int64_t numSMs = kDefaultNumSMs;
  std::string chip = kDefaultChip;
  std::string features = kDefaultFeatures;
  /// CUDA toolkit for ptxas; without one only PTX is written and the driver
  /// JIT-compiles it at load.
  std::string toolkit = kDefaultCudaToolkit;
};

/// Compiles the layer function of `module` (a moe.fused_moe or primitive moe
/// ops on tensors) and writes the bundle into `directory`, creating it.
/// `module` is transformed in place.
llvm::Error compileBundle(ModuleOp module, const BundleOptions &options,
                          llvm::StringRef directory);

} // namespace moe
} // namespace mlir

#endif // MOE_TARGET_BUNDLE_H
