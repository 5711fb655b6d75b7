//===- moe-opt.cpp - mlir-opt with the moe dialect and the GPU path -------===//
//
// mlir-opt with the moe dialect, passes and pipelines registered beside the
// upstream dialects, passes and pipelines the CPU and NVIDIA GPU lowerings
// use (gpu-lower-to-nvvm-pipeline, gpu-module-to-binary, #nvvm.target).
//
//===----------------------------------------------------------------------===//

#include "moe/Registration/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::moe::registerMoePasses();
  mlir::DialectRegistry registry;
  mlir::moe::registerMoeDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "moe optimizer driver\n", registry));
}
