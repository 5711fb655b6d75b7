//===- DefaultTarget.h - What moe-mlir compiles for unless told -*- C++ -*-===//
//
// The one definition of the default target, an H100 SXM with CUDA at its
// usual place: the passes' option defaults, moe-compile's and moe-run's, the
// bundle exporter's and the Python package's all come from here. The Python
// package is built without MLIR on the GPU machine, so CMake reads the values
// from this file (cmake/MoeDefaultTarget.cmake): keep it free of includes
// other than the standard library's, and each default on one line in the
// form `inline constexpr <type> kDefault<Name>... = <value>;`.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_DEFAULTTARGET_H
#define MOE_TARGET_DEFAULTTARGET_H

#include <cstdint>

namespace mlir {
namespace moe {

/// The GPU architecture of the kernel module (NVVM's `chip`): Hopper with its
/// architecture-specific features (wgmma, setmaxnreg).
inline constexpr char kDefaultChip[] = "sm_90a";
/// Every chip the kernels can be built for (convert-moe-to-gpu refuses
/// others): wgmma and setmaxnreg need Hopper's architecture-specific
/// features.
inline constexpr const char *kKnownChips[] = {kDefaultChip};
/// The oldest PTX ISA the kernels can be written in, times ten: 8.0, the
/// first with wgmma and TMA.
inline constexpr int kMinPtxVersion = 80;
/// The PTX features of the kernel module: PTX ISA 8.0, the first with wgmma
/// and TMA.
inline constexpr char kDefaultFeatures[] = "+ptx80";
/// The multiprocessors of the H100 SXM: what moe-split-k fills and what
/// persistent grids are sized for.
inline constexpr int64_t kDefaultNumSMs = 132;
/// Shared memory one block may have on the chips of kKnownChips (Hopper:
/// 227 KiB): moe.grouped_matmul's verifier bounds its config's ring by it,
/// and the wgmma kernels their staging.
inline constexpr int64_t kMaxBlockSharedBytes = 227 * 1024;
/// The CUDA device name (cudaDeviceProp::name) of the H100 SXM, what tuned
/// grouped-matmul configs are looked up for.
inline constexpr char kDefaultDeviceName[] = "NVIDIA H100 80GB HBM3";
/// The CUDA toolkit whose ptxas makes cubins and whose libdevice is linked
/// into kernels that call math functions.
inline constexpr char kDefaultCudaToolkit[] = "/usr/local/cuda";

} // namespace moe
} // namespace mlir

#endif // MOE_TARGET_DEFAULTTARGET_H
