//===- CpuFunction.h - JIT a function of moe ops on the host ----*- C++ -*-===//
//
// Compiles one function of a module of moe ops through moe-cpu-pipeline and
// runs it in-process with mlir::ExecutionEngine on host tensors.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CPUJIT_CPUFUNCTION_H
#define MOE_CPUJIT_CPUFUNCTION_H

#include "moe/CpuJit/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <memory>

namespace mlir {
class ExecutionEngine;

namespace moe {

/// The host element type of an MLIR element type (f32, bf16, f16, i32,
/// f8E4M3FN).
FailureOr<ElementType> getHostElementType(Type type);

/// A function of tensors compiled for the CPU. Its arguments and results are
/// ranked tensors of f32/bf16/f16/i32/f8E4M3FN; every dynamic dimension of the
/// arguments denotes one size (the token count), which `run` checks.
class CpuFunction {
public:
  ~CpuFunction();

  /// Lowers a clone of `module` through moe-cpu-pipeline and JIT-compiles
  /// function `entry` (the module's only function when empty).
  static llvm::Expected<std::unique_ptr<CpuFunction>>
  compile(mlir::ModuleOp module, llvm::StringRef entry = "");

  /// Runs the function; checks every input's element type and shape against
  /// the signature first.
  llvm::Expected<std::vector<HostTensor>>
  run(const std::vector<HostTensor> &inputs) const;

private:
  struct Signature {
    ElementType type;
    std::vector<int64_t> shape; // ShapedType::kDynamic for `?`
  };
  CpuFunction() = default;

  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::string name;
  std::vector<Signature> arguments, results;
};

} // namespace moe
} // namespace mlir

#endif // MOE_CPUJIT_CPUFUNCTION_H
