//===- Pipelines.h - moe pass pipelines -------------------------*- C++ -*-===//

#ifndef MOE_PIPELINES_PIPELINES_H
#define MOE_PIPELINES_PIPELINES_H

#include "moe/Target/DefaultTarget.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir {
namespace moe {

/// Lowers a module of moe ops on tensors (functions with tensor arguments and
/// results) to the LLVM dialect through the CPU loops: moe-decompose,
/// convert-moe-to-loops, one-shot bufferization across function boundaries,
/// buffer deallocation, then the standard conversions to LLVM. The result
/// runs through mlir::ExecutionEngine; functions that should be callable from
/// C++ need `llvm.emit_c_interface`.
void buildMoeCpuPipeline(OpPassManager &pm);

/// What moe-gpu-pipeline builds kernels for: the target and the sizes. The
/// defaults are moe-compile's.
struct MoeGpuPipelineOptions
    : public PassPipelineOptions<MoeGpuPipelineOptions> {
  /// The token count the choices are made for: `tokens`, or tokens-max.
  int64_t choiceTokens() const { return tokens ? tokens : tokensMax; }

  Option<int64_t> tokensMax{
      *this, "tokens-max",
      llvm::cl::desc("Largest token count the kernels and workspaces are "
                     "sized for"),
      llvm::cl::init(16384)};
  Option<int64_t> tokens{
      *this, "tokens",
      llvm::cl::desc("The token count routing blocks, tiles and K splits are "
                     "chosen for (0: tokens-max); a bundle's variant for "
                     "token counts up to N is compiled with tokens=N"),
      llvm::cl::init(0)};
  Option<std::string> phase{
      *this, "phase",
      llvm::cl::desc("The phase of an expert-parallel layer to compile "
                     "(dispatch, experts or combine: moe-expert-parallel's "
                     "phase); a layer that is not expert parallel has none"),
      llvm::cl::init("")};
  Option<int64_t> blockM{
      *this, "block-m",
      llvm::cl::desc("Rows per routing block (0: chosen for `tokens`, 128 "
                     "once the experts average 64 rows, else 64)"),
      llvm::cl::init(0)};
  Option<int64_t> blockN{
      *this, "block-n",
      llvm::cl::desc("Accumulator columns per grouped-matmul block (0: "
                     "moe-tile's heuristic)"),
      llvm::cl::init(0)};
  Option<int64_t> numStages{
      *this, "num-stages",
      llvm::cl::desc("Shared-memory stages of the grouped matmuls (0: "
                     "moe-tile's heuristic)"),
      llvm::cl::init(0)};
  Option<std::string> configDatabase{
      *this, "config-db",
      llvm::cl::desc("Tuned config database (JSON, docs/CONFIG-DATABASE.md) "
                     "consulted before the shipped entries")};
  Option<std::string> device{
      *this, "device",
      llvm::cl::desc("CUDA device name the tuned configs are looked up for"),
      llvm::cl::init(kDefaultDeviceName)};
  Option<int64_t> numSMs{
      *this, "num-sms",
      llvm::cl::desc("Multiprocessors of the target GPU: what K splits fill "
                     "and persistent grids are sized for"),
      llvm::cl::init(kDefaultNumSMs)};
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("GPU architecture of the kernels"),
                           llvm::cl::init(kDefaultChip)};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX features of the kernels"),
                               llvm::cl::init(kDefaultFeatures)};
};

/// The first half of moe-gpu-pipeline, the moe passes: moe-decompose,
/// moe-tile, moe-split-k, moe-tma and convert-moe-to-gpu. A layer of moe ops
/// on tensors becomes the kernel module `@moe_kernels` (gpu, nvgpu and nvvm
/// ops) with its launch plan in attributes, which the bundle writer reads
/// before the second half drops them.
void buildMoeToKernelsPipeline(OpPassManager &pm,
                               const MoeGpuPipelineOptions &options);

/// The second half of moe-gpu-pipeline, upstream's lowering of the kernel
/// module to the LLVM and NVVM dialects (one pointer per buffer, TMA
/// descriptors by value), ready for gpu-module-to-binary.
void buildKernelLoweringPipeline(OpPassManager &pm);

/// moe-gpu-pipeline: both halves, in that order.
void buildMoeGpuPipeline(OpPassManager &pm,
                         const MoeGpuPipelineOptions &options);

/// Register `moe-cpu-pipeline` and `moe-gpu-pipeline` with the pass registry.
void registerMoeCpuPipeline();
void registerMoeGpuPipeline();

} // namespace moe
} // namespace mlir

#endif // MOE_PIPELINES_PIPELINES_H
