//===- Bundle.cpp - Compile a layer to a kernel bundle --------------------===//

#include "moe/Target/Bundle.h"
#include "moe/Conversion/MoeToGPU/MoeToGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Runs `pipeline` on `module`, returning its diagnostics as the error.
llvm::Error runPipeline(ModuleOp module, const std::string &pipeline) {
  PassManager pm(module.getContext());
  if (failed(parsePassPipeline(pipeline, pm)))
    return makeError("malformed pipeline: " + pipeline);
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
  std::string toolkit =
      options.toolkit.empty() ? "" : " toolkit=" + options.toolkit;
  if (llvm::Error error = runPipeline(
          *clone,
          ("gpu-module-to-binary{format=" + format + toolkit + "}").str()))
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
} // namespace

llvm::Error mlir::moe::compileBundle(ModuleOp module,
                                     const BundleOptions &options,
                                     StringRef directory) {
  // The names travel quoted inside a pass-pipeline string.
  if (StringRef(options.configDatabase).contains('\'') ||
      StringRef(options.device).contains('\''))
    return makeError("the config database path and the device name must not "
                     "contain a quote (')");
  std::string toGpu = llvm::formatv(
      "moe-decompose{{block-m={0} tokens={1}},moe-tile{{tokens={1} block-n={4} "
      "num-stages={5} config-db='{6}' device='{7}'},moe-split-k{{tokens={1} "
      "num-sms={8}},moe-tma,convert-moe-to-gpu{{tokens-max={1} chip={2} "
      "features={3} num-sms={8}}",
      options.blockM, options.tokensMax, options.chip, options.features,
      options.blockN, options.numStages, options.configDatabase, options.device,
      options.numSMs);
  if (llvm::Error error = runPipeline(module, toGpu))
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

  // Kernels (nvgpu's TMA and mbarrier ops included) to NVVM with one
  // pointer per buffer, TMA descriptors (the kernels' `moe.tensor_maps`) by
  // value. Math ops (the GEMM epilogues' exp
  // and erf) become libdevice calls, linked at serialization from the
  // toolkit; the routing kernels need none.
  if (llvm::Error error = runPipeline(
          module, "gpu.module(convert-scf-to-cf,convert-nvgpu-to-nvvm,"
                  "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},"
                  "convert-nvvm-to-llvm,moe-grid-constant-tensor-maps,"
                  "canonicalize,cse,reconcile-unrealized-casts)"))
    return error;
  auto cubin = serialize(module, "bin", options);
  bool hasCubin = static_cast<bool>(cubin);
  if (!hasCubin)
    llvm::consumeError(cubin.takeError());
  std::string manifest = llvm::formatv(
      "moe-bundle 1\n# {0} kernels and launch plan of one MoE "
      "layer, written by moe-compile (docs/BUNDLE.md).\n"
      "target {0}\nmodule {1}kernels.ptx\ntokens-max {2}\n{3}",
      options.chip, hasCubin ? "kernels.cubin " : "", options.tokensMax, *plan);
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
