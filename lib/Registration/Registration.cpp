//===- Registration.cpp - What the moe tools register ---------------------===//

#include "moe/Registration/Registration.h"
#include "moe/Conversion/Passes.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"
#include "moe/Dialect/Moe/Transforms/Passes.h"
#include "moe/Pipelines/Pipelines.h"

#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

void mlir::moe::registerMoeDialects(DialectRegistry &registry) {
  registry.insert<MoeDialect>();
  // All upstream dialects, with their external models (bufferization,
  // deallocation, tiling) that one-shot bufferization and the GPU lowering
  // look up on dialects other than the one they transform.
  registerAllDialects(registry);
  registerAllExtensions(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}

void mlir::moe::registerMoePasses() {
  registerAllPasses();
  registerMoeTransformsPasses();
  registerMoeConversionPasses();
  registerMoeCpuPipeline();
  registerMoeGpuPipeline();
}
