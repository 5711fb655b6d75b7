//===- BundleWriter.cpp - Compile a layer to a kernel bundle --------------===//

#include "moe/Target/BundleWriter.h"
#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <fcntl.h>
#include <map>

using namespace mlir;
using namespace mlir::moe;

namespace {
llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// A warning as `warned` (see runPipeline) keys it: moe-tile's fallback to
/// its heuristic once per shape, whichever token count it was seen at and
/// whichever config the heuristic gave there (decode variants get rings of
/// their own).
std::string warningKey(StringRef message) {
  return message.take_front(message.find(" near ")).str();
}

/// Runs the passes `build` adds on `module`, returning their diagnostics as
/// the error. Warnings (moe-tile's heuristic fallback) go on to the caller's
/// handler, each once: those in `warned` were reported by an earlier run.
llvm::Error runPipeline(ModuleOp module,
                        function_ref<void(OpPassManager &)> build,
                        llvm::StringSet<> *warned = nullptr) {
  PassManager pm(module.getContext());
  build(pm);
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
    if (d.getSeverity() != DiagnosticSeverity::Error)
      return success(warned && !warned->insert(warningKey(d.str())).second);
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
  if (isa<Float8E4M3FNType>(type))
    return std::string("f8e4m3");
  // Raw bytes: packed MXFP4 weights (i8, two e2m1 codes each) and their
  // e8m0 scales, which the kernels decode themselves.
  if (type.isSignlessInteger(8) || isa<Float8E8M0FNUType>(type))
    return std::string("u8");
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
  os << " smem " << launch.getSmem();
  if (launch.getDependent())
    os << " dependent";
  os << " args";
  for (const LaunchArg &arg : launch.getArgs()) {
    os << " ";
    if (arg.kind != LaunchArgKind::buffer)
      os << stringifyLaunchArgKind(arg.kind) << ":";
    os << arg.value.getValue();
  }
  os << "\n";
}

/// The launch plan of `kernels`, read before their lowering drops it.
llvm::Expected<LaunchPlanAttr> launchPlanOf(gpu::GPUModuleOp kernels) {
  auto *dialect = kernels->getContext()->getLoadedDialect<MoeDialect>();
  if (LaunchPlanAttr plan = dialect->getLaunchPlanAttrHelper().getAttr(kernels))
    return plan;
  return makeError("the kernel module has no launch plan");
}

/// The `tensor` or `workspace` statements of the plan's buffers of `role`,
/// in signature order (arguments, then results), workspaces by name; an
/// exchange buffer's `exchange` statement after its `tensor`.
llvm::Error writeBuffers(raw_ostream &os, LaunchPlanAttr plan,
                         BufferRole role) {
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
    if (ExpertParallelAttr exchange = buffer.getExchange())
      os << "exchange " << buffer.getName() << " world " << exchange.getWorld()
         << " rank " << exchange.getRank() << "\n";
  }
  return llvm::Error::success();
}

/// The caller tensors of the plan of `kernels`: the `tensor` statements.
llvm::Expected<std::string> writeTensors(gpu::GPUModuleOp kernels) {
  auto plan = launchPlanOf(kernels);
  if (!plan)
    return plan.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  for (BufferRole role : {BufferRole::input, BufferRole::output})
    if (llvm::Error error = writeBuffers(os, *plan, role))
      return std::move(error);
  return text;
}

/// The rest of the plan of `kernels`, what a variant of the bundle holds:
/// its workspaces, fills, tensor maps and launches.
llvm::Expected<std::string> writeVariantPlan(gpu::GPUModuleOp kernels) {
  auto plan = launchPlanOf(kernels);
  if (!plan)
    return plan.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  if (llvm::Error error = writeBuffers(os, *plan, BufferRole::workspace))
    return std::move(error);
  for (StringAttr name : plan->getZeroFill())
    os << "zero " << name.getValue() << "\n";
  for (PlanTensorMapAttr map : plan->getTensorMaps())
    if (llvm::Error error =
            writeTensorMap(os, map, plan->lookupBuffer(map.getBuffer())))
      return std::move(error);
  auto *dialect = kernels->getContext()->getLoadedDialect<MoeDialect>();
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
  file.close();
  // Cleared, or the stream would abort the process when destroyed.
  if (std::error_code failure = file.error()) {
    file.clear_error();
    return makeError("cannot write " + path + ": " + failure.message());
  }
  return llvm::Error::success();
}

/// Whether `directory` may be replaced by a bundle: it holds nothing, or no
/// directory and a manifest.txt (a bundle, with whatever a cache put beside
/// its files). Anything else was not written by the bundle writer and is
/// not its to delete.
bool isReplaceable(StringRef directory) {
  std::error_code error;
  bool empty = true, manifest = false;
  for (llvm::sys::fs::directory_iterator entry(directory, error, false), end;
       !error && entry != end; entry.increment(error)) {
    empty = false;
    manifest |= llvm::sys::path::filename(entry->path()) == "manifest.txt";
    if (entry->type() == llvm::sys::fs::file_type::directory_file)
      return false;
  }
  return !error && (empty || manifest);
}

/// Swaps the directories `staged` and `target` (which both exist) in one
/// step where the system can (Linux's renameat2), else moves `target` aside
/// first; either way `staged` then names the old directory.
std::error_code exchangeDirectories(StringRef staged, StringRef target) {
  std::string from = staged.str(), to = target.str();
#ifdef RENAME_EXCHANGE
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(),
                RENAME_EXCHANGE) == 0)
    return std::error_code();
  if (errno != EINVAL && errno != ENOSYS)
    return std::error_code(errno, std::generic_category());
#endif
  llvm::SmallString<128> aside;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory(to + ".old", aside))
    return error;
  if (std::error_code error = llvm::sys::fs::rename(to, aside))
    return error;
  if (std::error_code error = llvm::sys::fs::rename(from, to))
    return error;
  return llvm::sys::fs::rename(aside, from);
}

/// Writes `files` (name, contents) as the directory `directory`, all at
/// once: into a fresh directory beside it, then renamed into its place, so
/// that a failure leaves `directory` as it was and a loader never sees the
/// files of two bundles, or half of one. An existing `directory` is
/// replaced when isReplaceable says so.
llvm::Error writeDirectory(StringRef directory,
                           ArrayRef<std::pair<StringRef, StringRef>> files) {
  // Staged beside the directory a symbolic link names, which it replaces.
  llvm::SmallString<128> target;
  if (llvm::sys::fs::real_path(directory, target)) {
    target = directory;
    if (std::error_code error = llvm::sys::fs::make_absolute(target))
      return makeError("cannot resolve " + directory + ": " + error.message());
    llvm::sys::path::remove_dots(target, /*remove_dot_dot=*/true);
  }
  StringRef parent = llvm::sys::path::parent_path(target);
  if (std::error_code error = llvm::sys::fs::create_directories(parent))
    return makeError("cannot create " + parent + ": " + error.message());
  llvm::SmallString<128> staged;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory(target + ".staging", staged))
    return makeError("cannot create a directory beside " + directory + ": " +
                     error.message());
  llvm::scope_exit cleanup(
      [&] { llvm::sys::fs::remove_directories(staged, true); });
  for (auto [name, contents] : files) {
    llvm::SmallString<128> path(staged);
    llvm::sys::path::append(path, name);
    if (llvm::Error error = writeFile(path, contents))
      return error;
  }
  // Onto a directory that does not exist or is empty, a rename is enough.
  if (!llvm::sys::fs::rename(staged, target))
    return llvm::Error::success();
  if (!llvm::sys::fs::is_directory(target))
    return makeError("cannot write the bundle " + directory +
                     ": it exists and is not a directory");
  if (!isReplaceable(target))
    return makeError("not replacing " + directory +
                     ": it is a directory of something other than a bundle");
  if (std::error_code error = exchangeDirectories(staged, target))
    return makeError("cannot replace " + directory + ": " + error.message());
  return llvm::Error::success();
}

/// Fails unless the kernel target is one the kernels can be built for and
/// a toolkit given in its place names a directory (without one, the bundle
/// would silently have no cubin).
llvm::Error checkOptions(const BundleOptions &options) {
  if (std::optional<std::string> error =
          checkKernelTarget(options.pipeline.chip, options.pipeline.features))
    return makeError(*error);
  if (options.toolkit != kDefaultCudaToolkit &&
      !llvm::sys::fs::is_directory(options.toolkit))
    return makeError("the CUDA toolkit '" + options.toolkit +
                     "' is not a directory");
  return llvm::Error::success();
}

/// The kernel module convert-moe-to-gpu made in `module`, or null.
gpu::GPUModuleOp kernelModuleOf(ModuleOp module) {
  for (auto candidate : module.getOps<gpu::GPUModuleOp>())
    if (candidate.getName() == kKernelModuleName)
      return candidate;
  return {};
}

/// A variant of a bundle: kernels for the token counts above the previous
/// variant's up to `maxTokens`, whose choices (routing blocks, tiles, K
/// splits) were made for a token count in that range.
struct Variant {
  int64_t maxTokens;
  OwningOpRef<ModuleOp> module;
  /// The kernel module as text, which tells variants apart.
  std::string kernelsText;
};

/// Compiles a layer through the moe half of moe-gpu-pipeline with its
/// choices made for given token counts, all sized for tokens-max, and finds
/// the ranges of token counts whose kernels are the same.
class VariantCompiler {
public:
  VariantCompiler(ModuleOp module, const BundleOptions &options)
      : module(module), options(options) {}

  /// The variants up to tokens-max: with the options' token buckets, one
  /// per bucket (neighbours with the same kernels merged); else the token
  /// counts where the kernels change, searched between powers of two, so
  /// that every token count runs the kernels a bundle for it alone would.
  llvm::Expected<SmallVector<Variant>> compile();

private:
  /// The kernels for `tokens` (compiled once).
  llvm::Expected<Variant *> at(int64_t tokens);
  /// Compiles the token counts in (lower, upper) that tell where the kernels
  /// change, given both ends compiled: none where the ends agree.
  llvm::Error refine(int64_t lower, int64_t upper);

  ModuleOp module;
  const BundleOptions &options;
  std::map<int64_t, Variant> compiled;
  llvm::StringSet<> warned;
};

llvm::Expected<Variant *> VariantCompiler::at(int64_t tokens) {
  auto found = compiled.find(tokens);
  if (found != compiled.end())
    return &found->second;
  MoeGpuPipelineOptions pipeline;
  pipeline.copyOptionValuesFrom(options.pipeline);
  pipeline.tokens = tokens;
  OwningOpRef<ModuleOp> clone(module.clone());
  if (llvm::Error error = runPipeline(
          *clone,
          [&](OpPassManager &pm) { buildMoeToKernelsPipeline(pm, pipeline); },
          &warned))
    return std::move(error);
  gpu::GPUModuleOp kernels = kernelModuleOf(*clone);
  if (!kernels)
    return makeError("convert-moe-to-gpu made no kernel module");
  std::string text;
  llvm::raw_string_ostream os(text);
  kernels->print(os);
  return &(compiled[tokens] = Variant{tokens, std::move(clone), text});
}

llvm::Error VariantCompiler::refine(int64_t lower, int64_t upper) {
  if (upper - lower < 2 ||
      compiled.at(lower).kernelsText == compiled.at(upper).kernelsText)
    return llvm::Error::success();
  int64_t middle = lower + (upper - lower) / 2;
  if (auto variant = at(middle); !variant)
    return variant.takeError();
  if (llvm::Error error = refine(lower, middle))
    return error;
  return refine(middle, upper);
}

llvm::Expected<SmallVector<Variant>> VariantCompiler::compile() {
  int64_t tokensMax = options.pipeline.tokensMax;
  SmallVector<int64_t> points(options.tokenBuckets);
  if (points.empty())
    for (int64_t power = 1; power < tokensMax; power *= 2)
      points.push_back(power);
  if (points.empty() || points.back() != tokensMax)
    points.push_back(tokensMax);
  for (auto [index, tokens] : llvm::enumerate(points)) {
    if (tokens < 1 || tokens > tokensMax ||
        (index && tokens <= points[index - 1]))
      return makeError("token buckets must rise from 1 to tokens-max (" +
                       Twine(tokensMax) + "), got " + Twine(tokens));
    if (auto variant = at(tokens); !variant)
      return variant.takeError();
    if (index && options.tokenBuckets.empty())
      if (llvm::Error error = refine(points[index - 1], tokens))
        return std::move(error);
  }
  // A variant is a run of compiled token counts with the same kernels; it
  // serves up to the run's last.
  SmallVector<Variant> variants;
  for (auto &[tokens, variant] : compiled) {
    if (!variants.empty() &&
        variants.back().kernelsText == variant.kernelsText) {
      variants.back().maxTokens = tokens;
      continue;
    }
    variants.push_back(std::move(variant));
    variants.back().maxTokens = tokens;
  }
  return variants;
}

/// The launch plans of the variants as the manifest's statements after its
/// header: the caller tensors, the same in every variant, then a `variant`
/// section each. With several variants, each kernel's name gets its
/// variant's bound (`_t<max tokens>`), so that all live in one module.
llvm::Expected<std::string>
writeVariantPlans(MutableArrayRef<Variant> variants) {
  std::string text, tensors;
  llvm::raw_string_ostream os(text);
  for (Variant &variant : variants) {
    gpu::GPUModuleOp kernels = kernelModuleOf(*variant.module);
    if (variants.size() > 1)
      for (auto kernel : kernels.getOps<gpu::GPUFuncOp>())
        SymbolTable::setSymbolName(
            kernel, (kernel.getName() + "_t" + Twine(variant.maxTokens)).str());
    auto variantTensors = writeTensors(kernels);
    if (!variantTensors)
      return variantTensors.takeError();
    if (tensors.empty())
      os << (tensors = *variantTensors);
    else if (tensors != *variantTensors)
      return makeError(
          "the layer's tensors differ between the bundle's token variants "
          "(routing arrays sized by a routing block that depends on the token "
          "count): give the routing block size, or compile one variant");
    auto plan = writeVariantPlan(kernels);
    if (!plan)
      return plan.takeError();
    os << "variant " << variant.maxTokens << "\n" << *plan;
  }
  return text;
}

/// Moves the kernels of every variant into the first variant's kernel
/// module, dropping the launch plans (written already), so that one cubin
/// holds them all.
void mergeKernels(MutableArrayRef<Variant> variants) {
  gpu::GPUModuleOp into = kernelModuleOf(*variants.front().module);
  auto *dialect = into->getContext()->getLoadedDialect<MoeDialect>();
  for (Variant &variant : variants) {
    gpu::GPUModuleOp from = kernelModuleOf(*variant.module);
    from->removeAttr(dialect->getLaunchPlanAttrHelper().getName());
    for (auto kernel : from.getOps<gpu::GPUFuncOp>())
      kernel->removeAttr(dialect->getLaunchAttrHelper().getName());
    if (from == into)
      continue;
    for (Operation &op : llvm::make_early_inc_range(*from.getBody())) {
      // The base of dynamic shared memory is the same in every variant.
      auto symbol = dyn_cast<SymbolOpInterface>(op);
      if (symbol && SymbolTable::lookupSymbolIn(into, symbol.getNameAttr()))
        continue;
      op.moveBefore(into.getBody(), into.getBody()->end());
    }
  }
}
} // namespace

llvm::Error mlir::moe::compileBundle(ModuleOp module,
                                     const BundleOptions &options,
                                     StringRef directory) {
  if (llvm::Error error = checkOptions(options))
    return error;
  // moe-gpu-pipeline in its two halves: the launch plans are read between
  // them, while the kernels still carry them.
  auto variants = VariantCompiler(module, options).compile();
  if (!variants)
    return variants.takeError();
  auto plans = writeVariantPlans(*variants);
  if (!plans)
    return plans.takeError();
  mergeKernels(*variants);
  ModuleOp lowered = *variants->front().module;
  if (llvm::Error error = runPipeline(lowered, buildKernelLoweringPipeline))
    return error;
  auto cubin = serialize(lowered, "bin", options);
  bool hasCubin = static_cast<bool>(cubin);
  if (!hasCubin)
    llvm::consumeError(cubin.takeError());
  std::string manifest = llvm::formatv(
      "moe-bundle 3\n# {0} kernels and launch plans of one MoE layer, a "
      "variant per range of token counts, written by moe-compile "
      "(docs/BUNDLE.md).\n"
      "target {0}\nmodule {1}kernels.ptx\ntokens-max {2}\n{3}",
      options.pipeline.chip.getValue(), hasCubin ? "kernels.cubin " : "",
      options.pipeline.tokensMax.getValue(), *plans);
  auto ptx = serialize(lowered, "isa", options);
  if (!ptx)
    return ptx.takeError();

  SmallVector<std::pair<StringRef, StringRef>> files = {
      {"kernels.ptx", *ptx}, {"manifest.txt", manifest}};
  if (hasCubin)
    files.push_back({"kernels.cubin", *cubin});
  return writeDirectory(directory, files);
}
