//===- MoeToGPU.h - moe ops to GPU kernels and a launch plan ----*- C++ -*-===//

#ifndef MOE_CONVERSION_MOETOGPU_MOETOGPU_H
#define MOE_CONVERSION_MOETOGPU_MOETOGPU_H

#include "moe/Target/DefaultTarget.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
namespace moe {

#define GEN_PASS_DECL_CONVERTMOETOGPU
#include "moe/Conversion/Passes.h.inc"

/// The name of the kernel module convert-moe-to-gpu creates.
constexpr llvm::StringLiteral kKernelModuleName = "moe_kernels";

/// What is wrong with a kernel target, if anything: `chip` must be one of
/// kKnownChips, and `features` empty (the back end's default PTX ISA for the
/// chip) or `+ptxNN`, a PTX ISA that LLVM's NVPTX back end knows, at least
/// kMinPtxVersion. Unchecked, an empty chip crashes #nvvm.target's
/// verifier, and an older PTX ISA aborts instruction selection.
std::optional<std::string> checkKernelTarget(llvm::StringRef chip,
                                             llvm::StringRef features);

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_MOETOGPU_MOETOGPU_H
