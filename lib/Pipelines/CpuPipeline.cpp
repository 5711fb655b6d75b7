//===- CpuPipeline.cpp - moe ops to LLVM through loops --------------------===//

#include "moe/Pipelines/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/ErrorHandling.h"

using namespace mlir;

// Kept as a textual pipeline so that it reads like the moe-opt command line
// it is equivalent to. bf16 widening/narrowing is expanded to integer ops
// (arith-expand) because the host may lack native bf16 conversions; math ops
// become LLVM intrinsics where LLVM has one (fma, roundeven: native
// instructions) and libm calls otherwise (erff), which the JIT resolves in the
// host process.
static constexpr const char *kCpuPipeline =
    "moe-decompose,"
    "convert-moe-to-loops,"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-deallocation-pipeline,"
    "convert-bufferization-to-memref,"
    "expand-strided-metadata,"
    "lower-affine,"
    "convert-scf-to-cf,"
    "arith-expand{include-bf16},"
    "convert-math-to-llvm,"
    "convert-math-to-libm,"
    "convert-to-llvm,"
    "reconcile-unrealized-casts";

void mlir::moe::buildMoeCpuPipeline(OpPassManager &pm) {
  if (failed(parsePassPipeline(kCpuPipeline, pm)))
    llvm::report_fatal_error("moe-cpu-pipeline: malformed pipeline text");
}

void mlir::moe::registerMoeCpuPipeline() {
  PassPipelineRegistration<>(
      "moe-cpu-pipeline",
      "Lower moe layers to the LLVM dialect through the CPU loops "
      "(moe-decompose, convert-moe-to-loops, bufferization, LLVM)",
      buildMoeCpuPipeline);
}
