//===- BundleWriter.cpp - Compile a layer to a kernel bundle --------------===//

#include "moe/Target/BundleWriter.h"
#include "moe/Conversion/MoeToGPU/MoeToGPU.h"

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

/// The tensors, workspaces, fills and launches of the plan recorded on
/// `kernels` (before their lowering drops the launch attributes).
llvm::Expected<std::string> writePlan(gpu::GPUModuleOp kernels) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto buffers = kernels->getAttrOfType<ArrayAttr>("moe.buffers");
  if (!buffers)
    return makeError("the kernel module has no launch plan");
  // Tensors in signature order (arguments, then results), then workspaces.
  for (StringRef role : {"input", "output", "workspace"}) {
    SmallVector<DictionaryAttr> selected;
    for (auto buffer : buffers.getAsRange<DictionaryAttr>())
      if (buffer.getAs<StringAttr>("role").getValue() == role)
        selected.push_back(buffer);
    llvm::sort(selected, [](DictionaryAttr a, DictionaryAttr b) {
      StringRef x = a.getAs<StringAttr>("name").getValue();
      StringRef y = b.getAs<StringAttr>("name").getValue();
      return x.size() != y.size() ? x.size() < y.size() : x < y;
    });
    for (DictionaryAttr buffer : selected) {
      auto dtype = dtypeName(buffer.getAs<TypeAttr>("type").getValue());
      if (!dtype)
        return dtype.takeError();
      os << (role == "workspace" ? "workspace " : "tensor ")
         << buffer.getAs<StringAttr>("name").getValue();
      if (role != "workspace")
        os << " " << role;
      os << " " << *dtype;
      for (auto dim : buffer.getAs<ArrayAttr>("dims").getAsRange<StringAttr>())
        os << " " << dim.getValue();
      os << "\n";
    }
  }
  for (auto name :
       kernels->getAttrOfType<ArrayAttr>("moe.zero").getAsRange<StringAttr>())
    os << "zero " << name.getValue() << "\n";
  for (auto map : kernels->getAttrOfType<ArrayAttr>("moe.tensormaps")
                      .getAsRange<DictionaryAttr>()) {
    auto dtype = dtypeName(map.getAs<TypeAttr>("type").getValue());
    if (!dtype)
      return dtype.takeError();
    auto dims = map.getAs<ArrayAttr>("dims");
    os << "tensormap " << map.getAs<StringAttr>("name").getValue() << " "
       << map.getAs<StringAttr>("tensor").getValue() << " " << *dtype
       << " rank " << dims.size() << " dims";
    for (auto dim : dims.getAsRange<StringAttr>())
      os << " " << dim.getValue();
    os << " strides";
    for (auto stride : map.getAs<ArrayAttr>("strides").getAsRange<StringAttr>())
      os << " " << stride.getValue();
    os << " box";
    for (int64_t size : map.getAs<DenseI64ArrayAttr>("box").asArrayRef())
      os << " " << size;
    os << " swizzle " << map.getAs<IntegerAttr>("swizzle").getInt() << "\n";
  }
  for (auto kernel : kernels.getOps<gpu::GPUFuncOp>()) {
    auto launch = kernel->getAttrOfType<DictionaryAttr>("moe.launch");
    if (!launch)
      continue;
    os << "launch " << kernel.getName() << " grid";
    for (auto size : launch.getAs<ArrayAttr>("grid").getAsRange<StringAttr>())
      os << " " << size.getValue();
    os << " block";
    for (int64_t size : launch.getAs<DenseI64ArrayAttr>("block").asArrayRef())
      os << " " << size;
    os << " smem " << launch.getAs<StringAttr>("smem").getValue() << " args";
    for (auto arg : launch.getAs<ArrayAttr>("args").getAsRange<StringAttr>())
      os << " " << arg.getValue();
    os << "\n";
  }
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
