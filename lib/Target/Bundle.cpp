//===- Bundle.cpp - Compile a layer to a kernel bundle --------------------===//

#include "moe/Target/Bundle.h"
#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"

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
