//===- GpuPipeline.cpp - moe ops to NVVM kernels and a launch plan --------===//
//
// The one place the GPU pass order lives: moe-compile, moe-run's GPU path
// and the Python module's compile_bundle run it (through the bundle writer),
// and `moe-opt --moe-gpu-pipeline` replays it. Passes are created with their
// generated option structs, so that no option value (a device name, a path)
// is ever spliced into pipeline text.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"
#include "moe/Pipelines/Pipelines.h"

#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::moe;

void mlir::moe::buildMoeToKernelsPipeline(
    OpPassManager &pm, const MoeGpuPipelineOptions &options) {
  // The routing block size, the tiles and the K splits are chosen for
  // `tokens`; kernels and workspaces are sized for tokens-max.
  int64_t tokens = options.choiceTokens();
  // An expert-parallel layer's phase: its own function, whose moe ops the
  // passes below compile as a layer's.
  MoeExpertParallelOptions expertParallel;
  expertParallel.blockM = options.blockM;
  expertParallel.phase = options.phase;
  pm.addPass(createMoeExpertParallel(expertParallel));
  MoeDecomposeOptions decompose;
  decompose.blockM = options.blockM;
  decompose.tokens = tokens;
  pm.addPass(createMoeDecompose(decompose));

  MoeTileOptions tile;
  tile.tokens = tokens;
  tile.blockN = options.blockN;
  tile.numStages = options.numStages;
  tile.configDatabase = options.configDatabase;
  tile.device = options.device;
  tile.numSMs = options.numSMs;
  pm.addPass(createMoeTile(tile));

  MoeSplitKOptions splitK;
  splitK.tokens = tokens;
  splitK.numSMs = options.numSMs;
  pm.addPass(createMoeSplitK(splitK));

  pm.addPass(createMoeTma());

  ConvertMoeToGPUOptions toGpu;
  toGpu.tokensMax = options.tokensMax;
  toGpu.tokens = tokens;
  toGpu.chip = options.chip;
  toGpu.features = options.features;
  toGpu.numSMs = options.numSMs;
  pm.addPass(createConvertMoeToGPU(toGpu));
}

void mlir::moe::buildKernelLoweringPipeline(OpPassManager &pm) {
  // Kernels (nvgpu's TMA and mbarrier ops included) to NVVM with one pointer
  // per buffer, the bundle's calling convention; TMA descriptors (the
  // kernels' `moe.grid_constant_args`) by value, which must follow
  // convert-gpu-to-nvvm (moe-grid-constant-tensor-maps says why). Math ops
  // (the GEMM epilogues' exp and erf) become libdevice calls, linked at
  // serialization from the toolkit.
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createSCFToControlFlowPass());
  kernels.addPass(createConvertNVGPUToNVVMPass());
  ConvertGpuOpsToNVVMOpsOptions toNvvm;
  toNvvm.useBarePtrCallConv = true;
  kernels.addPass(createConvertGpuOpsToNVVMOps(toNvvm));
  kernels.addPass(createConvertNVVMToLLVMPass());
  kernels.addPass(createMoeGridConstantTensorMaps());
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());
}

void mlir::moe::buildMoeGpuPipeline(OpPassManager &pm,
                                    const MoeGpuPipelineOptions &options) {
  buildMoeToKernelsPipeline(pm, options);
  buildKernelLoweringPipeline(pm);
}

void mlir::moe::registerMoeGpuPipeline() {
  PassPipelineRegistration<MoeGpuPipelineOptions>(
      "moe-gpu-pipeline",
      "Compile a layer of moe ops on tensors to NVVM kernels and their launch "
      "plan, as moe-compile does: moe-expert-parallel (the option phase's "
      "function of an expert-parallel layer), moe-decompose, moe-tile, "
      "moe-split-k, "
      "moe-tma, convert-moe-to-gpu (the kernel module @moe_kernels, the plan "
      "in its attributes), then on the kernel module convert-scf-to-cf, "
      "convert-nvgpu-to-nvvm, convert-gpu-to-nvvm (bare pointers), "
      "convert-nvvm-to-llvm, moe-grid-constant-tensor-maps, canonicalize, "
      "cse, reconcile-unrealized-casts; gpu-module-to-binary serializes the "
      "result. The options and their defaults are moe-compile's",
      buildMoeGpuPipeline);
}
