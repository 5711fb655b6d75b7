//===- moe-opt.cpp - mlir-opt with the moe dialect and the GPU path -------===//
//
// mlir-opt with the moe dialect, passes and pipelines registered beside the
// upstream dialects, passes and pipelines the CPU and NVIDIA GPU lowerings
// use (gpu-lower-to-nvvm-pipeline, gpu-module-to-binary, #nvvm.target). It
// reads its input itself, through the source limits the other tools and the
// Python package share (moe/Support/SourceLimits.h), then runs MlirOptMain
// on it as mlir-opt would.
//
//===----------------------------------------------------------------------===//

#include "moe/Registration/Registration.h"
#include "moe/Support/SourceLimits.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

int main(int argc, char **argv) {
  moe::registerMoePasses();
  DialectRegistry registry;
  moe::registerMoeDialects(registry);
  auto [inputFile, outputFile] = registerAndParseCLIOptions(
      argc, argv, "moe optimizer driver\n", registry);
  llvm::InitLLVM init(argc, argv);
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (config.shouldListPasses()) {
    printRegisteredPasses();
    return 0;
  }
  auto input = moe::readSourceFile(inputFile);
  if (!input) {
    llvm::errs() << llvm::toString(input.takeError()) << "\n";
    return 1;
  }
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (failed(MlirOptMain(output->os(), std::move(*input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
