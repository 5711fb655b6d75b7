//===- BundleWriter.cpp - Compile a layer to a kernel bundle --------------===//

#include "moe/Target/BundleWriter.h"
#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Runs the passes `build` adds on `module`, returning their diagnostics as
/// the error.
llvm::Error runPipeline(ModuleOp module,
                        function_ref<void(OpPassManager &)> build) {
  PassManager pm(module.getContext());
  build(pm);
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  // Errors become the llvm::Error; warnings (moe-tile's heuristic fallback)
  // go on to the caller's handler.
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() != DiagnosticSeverity::Error)
      return failure();
    os << d.getLocation() << ": " << d << "\n";
    return success();
  });
  if (failed(pm.run(module)))
    return makeError(diagnostics);
  return llvm::Error::success();
}

/// Element type names of the bundle format.
llvm::Expected<std::string> dtypeName(Type type) {
  if (type.isF32())
    return std::string("f32");
  if (type.isBF16())
    return std::string("bf16");
  if (type.isF16())
    return std::string("f16");
  if (type.isSignlessInteger(32))
    return std::string("i32");
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "no bundle element type for " << type;
  return makeError(text);
}

/// The `tensormap` statement of `map` over `buffer`: the buffer's dims
/// innermost first, the byte strides of the outer ones as size expressions
/// (a number while the inner dims are constants, then a product), the box
/// innermost first.
llvm::Error writeTensorMap(raw_ostream &os, PlanTensorMapAttr map,
                           PlanBufferAttr buffer) {
  auto dtype = dtypeName(buffer.getElementType());
  if (!dtype)
    return dtype.takeError();
  ArrayRef<StringAttr> dims = buffer.getDims();
  os << "tensormap " << map.getName() << " " << buffer.getName() << " "
     << *dtype << " rank " << dims.size() << " dims";
  for (StringAttr dim : llvm::reverse(dims))
    os << " " << dim.getValue();
  os << " strides";
  std::string stride =
      std::to_string(buffer.getElementType().getIntOrFloatBitWidth() / 8);
  for (StringAttr dim : llvm::reverse(dims.drop_front())) {
    int64_t strideValue, dimValue;
    if (!StringRef(stride).getAsInteger(10, strideValue) &&
        !dim.getValue().getAsInteger(10, dimValue))
      stride = std::to_string(strideValue * dimValue);
    else
      stride += "*(" + dim.getValue().str() + ")";
    os << " " << stride;
  }
  os << " box";
  for (int64_t size : llvm::reverse(map.getBox()))
    os << " " << size;
  os << " swizzle " << map.getSwizzle() << "\n";
  return llvm::Error::success();
}

/// The `launch` statement of `kernel`.
void writeLaunch(raw_ostream &os, StringRef kernel, LaunchAttr launch) {
  os << "launch " << kernel << " grid";
  for (StringAttr size : launch.getGrid())
    os << " " << size.getValue();
  os << " block";
  for (int64_t size : launch.getBlock())
    os << " " << size;
  os << " smem " << launch.getSmem() << " args";
  for (const LaunchArg &arg : launch.getArgs()) {
    os << " ";
    if (arg.kind != LaunchArgKind::buffer)
      os << stringifyLaunchArgKind(arg.kind) << ":";
    os << arg.value.getValue();
  }
  os << "\n";
}

/// The tensors, workspaces, fills, tensor maps and launches of the launch
/// plan of `kernels`, read from its gpu.func kernels (before their lowering).
llvm::Expected<std::string> writePlan(gpu::GPUModuleOp kernels) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto *dialect = kernels->getContext()->getLoadedDialect<MoeDialect>();
  LaunchPlanAttr plan = dialect->getLaunchPlanAttrHelper().getAttr(kernels);
  if (!plan)
    return makeError("the kernel module has no launch plan");
  // Tensors in signature order (arguments, then results), then workspaces.
  for (BufferRole role :
       {BufferRole::input, BufferRole::output, BufferRole::workspace}) {
    SmallVector<PlanBufferAttr> selected;
    for (PlanBufferAttr buffer : plan.getBuffers())
      if (buffer.getRole() == role)
        selected.push_back(buffer);
    llvm::sort(selected, [](PlanBufferAttr a, PlanBufferAttr b) {
      StringRef x = a.getName(), y = b.getName();
      return x.size() != y.size() ? x.size() < y.size() : x < y;
    });
    for (PlanBufferAttr buffer : selected) {
      auto dtype = dtypeName(buffer.getElementType());
      if (!dtype)
        return dtype.takeError();
      os << (role == BufferRole::workspace ? "workspace " : "tensor ")
         << buffer.getName();
      if (role != BufferRole::workspace)
        os << " " << stringifyBufferRole(role);
      os << " " << *dtype;
      for (StringAttr dim : buffer.getDims())
        os << " " << dim.getValue();
      os << "\n";
    }
  }
  for (StringAttr name : plan.getZeroFill())
    os << "zero " << name.getValue() << "\n";
  for (PlanTensorMapAttr map : plan.getTensorMaps())
    if (llvm::Error error =
            writeTensorMap(os, map, plan.lookupBuffer(map.getBuffer())))
      return std::move(error);
  for (auto kernel : kernels.getOps<gpu::GPUFuncOp>())
    if (LaunchAttr launch = dialect->getLaunchAttrHelper().getAttr(kernel))
      writeLaunch(os, kernel.getName(), launch);
  return text;
}

/// Serializes a clone of the lowered module in `format` and returns the
/// bytes of its single gpu.binary object.
llvm::Expected<std::string> serialize(ModuleOp lowered, StringRef format,
                                      const BundleOptions &options) {
  OwningOpRef<ModuleOp> clone(lowered.clone());
  GpuModuleToBinaryPassOptions toBinary;
  toBinary.compilationTarget = format.str();
  toBinary.toolkitPath = options.toolkit;
  if (llvm::Error error = runPipeline(*clone, [&](OpPassManager &pm) {
        pm.addPass(createGpuModuleToBinaryPass(toBinary));
      }))
    return std::move(error);
  for (auto binary : clone->getOps<gpu::BinaryOp>())
    for (auto object : binary.getObjects().getAsRange<gpu::ObjectAttr>())
      return object.getObject().getValue().str();
  return makeError("gpu-module-to-binary produced no object");
}

llvm::Error writeFile(const llvm::Twine &path, StringRef contents) {
  std::error_code error;
  llvm::raw_fd_ostream file(path.str(), error, llvm::sys::fs::OF_None);
  if (error)
    return makeError("cannot write " + path + ": " + error.message());
  file << contents;
  return llvm::Error::success();
}

/// Fails unless LLVM's NVPTX back end knows `chip`, which would otherwise
/// ignore it with a warning and then fail to select the kernels'
/// instructions (a crash, not a diagnostic).
llvm::Error checkChip(StringRef chip) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTargetMC();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return makeError("no NVPTX back end: " + error);
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(triple, "", ""));
  if (!subtarget || !subtarget->isCPUStringValid(chip))
    return makeError("unknown chip '" + chip + "' (e.g. " + kDefaultChip + ")");
  return llvm::Error::success();
}
} // namespace

llvm::Error mlir::moe::compileBundle(ModuleOp module,
                                     const BundleOptions &options,
                                     StringRef directory) {
  if (llvm::Error error = checkChip(options.pipeline.chip))
    return error;
  // moe-gpu-pipeline in its two halves: the launch plan is read between
  // them, while the kernels still carry it.
  if (llvm::Error error = runPipeline(module, [&](OpPassManager &pm) {
        buildMoeToKernelsPipeline(pm, options.pipeline);
      }))
    return error;
  gpu::GPUModuleOp kernels;
  for (auto candidate : module.getOps<gpu::GPUModuleOp>())
    if (candidate.getName() == kKernelModuleName)
      kernels = candidate;
  if (!kernels)
    return makeError("convert-moe-to-gpu made no kernel module");

  auto plan = writePlan(kernels);
  if (!plan)
    return plan.takeError();

  if (llvm::Error error = runPipeline(module, buildKernelLoweringPipeline))
    return error;
  auto cubin = serialize(module, "bin", options);
  bool hasCubin = static_cast<bool>(cubin);
  if (!hasCubin)
    llvm::consumeError(cubin.takeError());
  std::string manifest = llvm::formatv(
      "moe-bundle 1\n# {0} kernels and launch plan of one MoE "
      "layer, written by moe-compile (docs/BUNDLE.md).\n"
      "target {0}\nmodule {1}kernels.ptx\ntokens-max {2}\n{3}",
      options.pipeline.chip.getValue(), hasCubin ? "kernels.cubin " : "",
      options.pipeline.tokensMax.getValue(), *plan);
  auto ptx = serialize(module, "isa", options);
  if (!ptx)
    return ptx.takeError();

  if (std::error_code error = llvm::sys::fs::create_directories(directory))
    return makeError("cannot create " + directory + ": " + error.message());
  auto path = [&](StringRef name) {
    llvm::SmallString<128> result(directory);
    llvm::sys::path::append(result, name);
    return std::string(result);
  };
  if (hasCubin)
    if (llvm::Error error = writeFile(path("kernels.cubin"), *cubin))
      return error;
  if (llvm::Error error = writeFile(path("kernels.ptx"), *ptx))
    return error;
  return writeFile(path("manifest.txt"), manifest);
}
