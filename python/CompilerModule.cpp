//===- CompilerModule.cpp - moe_mlir._compiler ----------------------------===//
//
// The compiler half of the moe_mlir package: parse, verify and print moe IR,
// run textual pass pipelines as moe-opt takes them, run a function on the
// CPU path with numpy arrays, compile a layer to a bundle, and the presets'
// layer sources. Every failure becomes a Python exception: moe_mlir.Error
// with MLIR's diagnostics, or TypeError/ValueError for wrong arguments.
//
//===----------------------------------------------------------------------===//

#include "PythonError.h"

#include "moe/CpuJit/CpuFunction.h"
#include "moe/Dialect/Moe/IR/MoeAttrs.h"
#include "moe/Dialect/Moe/IR/MoeLimits.h"
#include "moe/Presets/Presets.h"
#include "moe/Registration/Registration.h"
#include "moe/Support/SourceLimits.h"
#include "moe/Target/BundleWriter.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ThreadPool.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace py = pybind11;
using namespace mlir;
using moe::ElementType;
using moe::HostTensor;
using moe_python::Error;

namespace {

//===----------------------------------------------------------------------===//
// Contexts and diagnostics
//===----------------------------------------------------------------------===//

/// A context with the moe dialect and everything the pipelines need. Each
/// module gets its own, so that its types and attributes die with it; all
/// share one thread pool instead of each starting its own threads.
std::shared_ptr<MLIRContext> createContext() {
  // Never destroyed: contexts may outlive any static, and idle threads cost
  // nothing at exit.
  static llvm::DefaultThreadPool *threadPool = new llvm::DefaultThreadPool();
  DialectRegistry registry;
  moe::registerMoeDialects(registry);
  auto context =
      std::make_shared<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
  context->setThreadPool(*threadPool);
  return context;
}

/// Collects the diagnostics of `context` while alive, formatted like
/// moe-opt's: location, severity, message, and the source line with a caret
/// where `sources` holds the buffer the location points into.
class DiagnosticCollector {
public:
  DiagnosticCollector(MLIRContext *context, llvm::SourceMgr &sources)
      : stream(text), handler(sources, context, stream) {}

  /// The diagnostics so far, or `fallback` when there are none.
  std::string take(llvm::StringRef fallback) {
    llvm::StringRef collected = llvm::StringRef(text).rtrim();
    return collected.empty() ? fallback.str() : collected.str();
  }

private:
  std::string text;
  llvm::raw_string_ostream stream;
  SourceMgrDiagnosticHandler handler;
};

/// The exception for a failure the compiler reports as an llvm::Error.
Error toException(llvm::Error error) {
  return Error(llvm::StringRef(llvm::toString(std::move(error))).rtrim().str());
}

/// The path an os.PathLike, str or bytes names, as the file system's bytes
/// (a str of a name that is not UTF-8 holds surrogates, which no std::string
/// takes).
std::string fsPath(py::handle path) {
  return py::module_::import("os").attr("fsencode")(path).cast<std::string>();
}

//===----------------------------------------------------------------------===//
// Module
//===----------------------------------------------------------------------===//

/// A module of IR with what it needs to live: its context, and the source
/// buffer its locations point into (kept so that diagnostics of later passes
/// still quote the line).
class Module {
public:
  /// Parses and verifies `text`; `name` is the buffer name that locations
  /// and diagnostics show.
  static std::unique_ptr<Module> parse(const std::string &text,
                                       const std::string &name) {
    if (llvm::Error error = moe::checkSource(text, name))
      throw toException(std::move(error));
    std::unique_ptr<Module> result(new Module());
    result->context = createContext();
    result->sources = std::make_shared<llvm::SourceMgr>();
    result->sources->AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, name), llvm::SMLoc());
    DiagnosticCollector diagnostics(result->context.get(), *result->sources);
    ParserConfig config(result->context.get());
    result->module = parseSourceFile<ModuleOp>(result->sources, config);
    if (!result->module)
      throw Error(diagnostics.take("could not parse the IR"));
    return result;
  }

  std::unique_ptr<Module> clone() const {
    std::unique_ptr<Module> result(new Module());
    result->context = context;
    result->sources = sources;
    result->module = module.get().clone();
    return result;
  }

  std::string print(bool generic, bool debugInfo) const {
    OpPrintingFlags flags;
    if (generic)
      flags.printGenericOpForm();
    if (debugInfo)
      flags.enableDebugInfo();
    std::string text;
    llvm::raw_string_ostream os(text);
    module.get()->print(os, flags);
    return moe_python::backslashReplace(text);
  }

  void verify() const {
    DiagnosticCollector diagnostics(context.get(), *sources);
    if (failed(mlir::verify(module.get())))
      throw Error(diagnostics.take("the module does not verify"));
  }

  /// Runs a textual pass pipeline as moe-opt takes it: a list of passes
  /// ("moe-decompose,canonicalize", "func.func(cse)") or one anchored on the
  /// module ("builtin.module(moe-decompose)"). The module changes only when
  /// the whole pipeline succeeds.
  void runPipeline(const std::string &pipeline) {
    // The pipeline parser recurses per nested pipeline as MLIR's does.
    if (llvm::Error error = moe::checkSource(pipeline, "<pipeline>"))
      throw toException(std::move(error));
    llvm::StringRef text = llvm::StringRef(pipeline).trim();
    PassManager pm(context.get(), ModuleOp::getOperationName());
    std::string errors;
    llvm::raw_string_ostream errorStream(errors);
    // A list parsed into a manager anchored on the module runs on it; an
    // anchored pipeline parsed into one would nest and never run, so it
    // replaces the manager's passes instead.
    bool parsed;
    if (text.starts_with("builtin.module(")) {
      FailureOr<OpPassManager> anchored = parsePassPipeline(text, errorStream);
      parsed = succeeded(anchored);
      if (parsed)
        static_cast<OpPassManager &>(pm) = std::move(*anchored);
    } else {
      parsed = succeeded(parsePassPipeline(text, pm, errorStream));
    }
    if (!parsed)
      throw Error("invalid pass pipeline '" + pipeline +
                  "': " + llvm::StringRef(errors).trim().str());

    OwningOpRef<ModuleOp> transformed(module.get().clone());
    DiagnosticCollector diagnostics(context.get(), *sources);
    if (failed(pm.run(*transformed)))
      throw Error("pass pipeline '" + pipeline + "' failed:\n" +
                  diagnostics.take("(no diagnostics)"));
    module = std::move(transformed);
  }

  ModuleOp get() const { return module.get(); }
  const std::shared_ptr<MLIRContext> &getContext() const { return context; }
  llvm::SourceMgr &getSources() const { return *sources; }

private:
  Module() = default;

  // Destroyed bottom-up: the IR before the buffers and context it uses.
  std::shared_ptr<MLIRContext> context;
  std::shared_ptr<llvm::SourceMgr> sources;
  OwningOpRef<ModuleOp> module;
};

//===----------------------------------------------------------------------===//
// CPU path
//===----------------------------------------------------------------------===//

/// The element type and shape of one argument or result of a function;
/// ShapedType::kDynamic marks the token count.
struct TensorSignature {
  ElementType type;
  std::vector<int64_t> shape;

  /// E.g. "tensor<?x16xbf16>".
  std::string str() const {
    std::string text = "tensor<";
    for (int64_t dim : shape)
      text += (ShapedType::isDynamic(dim) ? "?" : std::to_string(dim)) + "x";
    return text + moe::elementTypeName(type) + ">";
  }

  /// (dtype name, shape with None for the token count), for Python.
  py::tuple toPython() const {
    py::list dims;
    for (int64_t dim : shape)
      dims.append(ShapedType::isDynamic(dim) ? py::object(py::none())
                                             : py::object(py::int_(dim)));
    return py::make_tuple(moe::elementTypeName(type), py::tuple(dims));
  }
};

std::string describeShape(py::array array) {
  std::string text = "(";
  for (py::ssize_t d = 0; d < array.ndim(); ++d)
    text += (d ? ", " : "") + std::to_string(array.shape(d));
  return text + (array.ndim() == 1 ? ",)" : ")");
}

/// A result as a numpy array: f32, and bf16 and f8E4M3FN (which numpy
/// lacks) as float32, f16 as float16, i32 as int32.
py::array toArray(const HostTensor &tensor) {
  std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
  switch (tensor.type) {
  case ElementType::F32:
  case ElementType::F16:
  case ElementType::I32: {
    py::dtype dtype = tensor.type == ElementType::F32   ? py::dtype("float32")
                      : tensor.type == ElementType::F16 ? py::dtype("float16")
                                                        : py::dtype("int32");
    py::array array(dtype, shape);
    // std::copy, not memcpy: an empty tensor's data() may be null.
    std::copy(tensor.bytes.begin(), tensor.bytes.end(),
              static_cast<uint8_t *>(array.mutable_data()));
    return array;
  }
  case ElementType::BF16:
  case ElementType::F8E4M3FN: {
    std::vector<float> values = tensor.toFloats();
    py::array_t<float> array(shape);
    std::copy(values.begin(), values.end(), array.mutable_data());
    return array;
  }
  case ElementType::I8:
  case ElementType::F8E8M0FNU:
    // No layer returns codes; their bytes would be all numpy could hold.
    break;
  }
  throw Error("no numpy array for results of element type " +
              std::string(elementTypeName(tensor.type)));
}

/// A function of tensors compiled for the CPU (moe-cpu-pipeline and the
/// ExecutionEngine), called with numpy arrays.
class CpuFunction {
public:
  static std::unique_ptr<CpuFunction> compile(const Module &module,
                                              const std::string &entry) {
    func::FuncOp function;
    for (auto candidate : module.get().getOps<func::FuncOp>()) {
      if (candidate.isDeclaration() ||
          (!entry.empty() && candidate.getName() != entry))
        continue;
      if (function)
        throw py::value_error("the module has several functions; name the "
                              "one to compile with entry=");
      function = candidate;
    }
    if (!function)
      throw py::value_error(entry.empty()
                                ? "the module has no function to compile"
                                : "the module has no function '" + entry + "'");

    std::unique_ptr<CpuFunction> result(new CpuFunction());
    result->context = module.getContext();
    // As Python shows it: a symbol name may hold any bytes.
    result->name = moe_python::backslashReplace(function.getName().str());
    DiagnosticCollector diagnostics(module.getContext().get(),
                                    module.getSources());
    auto compiled = moe::CpuFunction::compile(module.get(), function.getName());
    if (!compiled)
      throw toException(compiled.takeError());
    result->function = std::move(*compiled);
    // compile checked that every type is a ranked tensor of a host type.
    auto describe = [](TypeRange types, std::vector<TensorSignature> &into) {
      for (Type type : types) {
        auto tensorType = cast<RankedTensorType>(type);
        into.push_back({*moe::getHostElementType(tensorType.getElementType()),
                        std::vector<int64_t>(tensorType.getShape().begin(),
                                             tensorType.getShape().end())});
      }
    };
    describe(function.getArgumentTypes(), result->arguments);
    describe(function.getResultTypes(), result->results);
    return result;
  }

  /// Checks and converts the arrays, runs the function without the GIL, and
  /// returns its result, or a tuple of its results.
  py::object run(py::args arrays) const {
    if (arrays.size() != arguments.size())
      throw py::type_error(llvm::formatv("'{0}' takes {1} arrays, got {2}",
                                         name, arguments.size(), arrays.size())
                               .str());
    std::vector<HostTensor> inputs;
    int64_t tokens = ShapedType::kDynamic;
    for (size_t i = 0; i < arrays.size(); ++i)
      inputs.push_back(toHostTensor(arrays[i], i, tokens));

    llvm::Expected<std::vector<HostTensor>> outputs = std::vector<HostTensor>();
    {
      py::gil_scoped_release release;
      outputs = function->run(inputs);
    }
    if (!outputs)
      throw toException(outputs.takeError());
    if (outputs->size() == 1)
      return toArray(outputs->front());
    py::tuple result(outputs->size());
    for (size_t i = 0; i < outputs->size(); ++i)
      result[i] = toArray((*outputs)[i]);
    return result;
  }

  std::string signature() const {
    auto join = [](const std::vector<TensorSignature> &types) {
      std::string text;
      for (const TensorSignature &type : types)
        text += (text.empty() ? "" : ", ") + type.str();
      return text;
    };
    return "@" + name + "(" + join(arguments) + ") -> (" + join(results) + ")";
  }

  py::list describe(bool ofResults) const {
    py::list list;
    for (const TensorSignature &type : ofResults ? results : arguments)
      list.append(type.toPython());
    return list;
  }

  const std::string &getName() const { return name; }

private:
  CpuFunction() = default;

  /// Argument `index` as a host tensor of its declared type. Floating
  /// arguments take any floating array, rounded to the element type (through
  /// float32); i32 arguments take integer arrays within int32's range.
  /// `tokens` is the size every `?` has, set by the first one met.
  HostTensor toHostTensor(py::handle object, size_t index,
                          int64_t &tokens) const {
    const TensorSignature &expected = arguments[index];
    std::string what = llvm::formatv("argument #{0} of '{1}' ({2})", index,
                                     name, expected.str())
                           .str();
    py::array array = py::array::ensure(object);
    if (!array)
      throw py::type_error(what + " must be a numpy array, got " +
                           py::str(py::type::of(object)).cast<std::string>());
    std::string dtype = py::str(array.dtype()).cast<std::string>();
    char kind = array.dtype().kind();
    bool integral = expected.type == ElementType::I32;
    if (integral && kind != 'i' && kind != 'u')
      throw py::type_error(what + " needs an integer array, got dtype " +
                           dtype);
    if (!integral && kind != 'f')
      throw py::type_error(what + " needs a floating-point array, got dtype " +
                           dtype);

    size_t rank = expected.shape.size();
    if (static_cast<size_t>(array.ndim()) != rank)
      throw py::value_error(what + " needs rank " + std::to_string(rank) +
                            ", got shape " + describeShape(array));
    std::vector<int64_t> shape;
    for (size_t d = 0; d < rank; ++d) {
      int64_t size = array.shape(d), want = expected.shape[d];
      if (!ShapedType::isDynamic(want) && size != want)
        throw py::value_error(llvm::formatv("{0}: dimension {1} must be {2}, "
                                            "got shape {3}",
                                            what, d, want, describeShape(array))
                                  .str());
      if (ShapedType::isDynamic(want)) {
        // Every `?` is the token count: the compiled loops trust them to
        // agree.
        if (!ShapedType::isDynamic(tokens) && size != tokens)
          throw py::value_error(
              llvm::formatv("{0}: dimension {1} is the token count, {2} in "
                            "the arguments before, got shape {3}",
                            what, d, tokens, describeShape(array))
                  .str());
        tokens = size;
      }
      shape.push_back(size);
    }

    if (integral)
      return HostTensor::fromInts(shape, kind == 'u'
                                             ? toInt32<uint64_t>(array, what)
                                             : toInt32<int64_t>(array, what));
    // Converted by the array_t constructor, which (unlike ensure) keeps
    // numpy's error, such as the MemoryError of a broadcast too large to
    // copy.
    py::array_t<float, py::array::c_style | py::array::forcecast> values(array);
    return HostTensor::fromFloats(
        expected.type, shape,
        std::vector<float>(values.data(), values.data() + values.size()));
  }

  /// The values of the integer array `array` read as `Wide` (int64 or
  /// uint64, so that no value wraps), each within int32's range.
  template <typename Wide>
  static std::vector<int32_t> toInt32(py::array array,
                                      const std::string &what) {
    py::array_t<Wide, py::array::c_style | py::array::forcecast> values(array);
    std::vector<int32_t> ints(values.size());
    for (py::ssize_t i = 0; i < values.size(); ++i) {
      Wide value = values.data()[i];
      bool fits = value <= Wide(std::numeric_limits<int32_t>::max());
      if constexpr (std::is_signed_v<Wide>)
        fits &= value >= std::numeric_limits<int32_t>::min();
      if (!fits)
        throw py::value_error(what + " holds " + std::to_string(value) +
                              ", out of int32's range");
      ints[i] = static_cast<int32_t>(value);
    }
    return ints;
  }

  // Kept alive with the compiled code, which came from its IR.
  std::shared_ptr<MLIRContext> context;
  std::unique_ptr<moe::CpuFunction> function;
  std::string name;
  std::vector<TensorSignature> arguments, results;
};

/// The element type named `dtype` ("f32", "bf16", "f16", "i32").
ElementType parseElementType(const std::string &dtype) {
  for (ElementType type : {ElementType::F32, ElementType::BF16,
                           ElementType::F16, ElementType::I32})
    if (dtype == moe::elementTypeName(type))
      return type;
  throw py::value_error("unknown element type '" + dtype +
                        "' (f32, bf16, f16, i32)");
}

/// `values` rounded to the nearest values of `dtype`, as float32.
py::array_t<float>
roundTo(py::array_t<float, py::array::c_style | py::array::forcecast> values,
        const std::string &dtype) {
  ElementType type = parseElementType(dtype);
  if (type == ElementType::I32)
    throw py::value_error("round_to rounds to f32, bf16 or f16");
  py::array_t<float> result(
      std::vector<py::ssize_t>(values.shape(), values.shape() + values.ndim()));
  float *out = result.mutable_data();
  for (py::ssize_t i = 0; i < values.size(); ++i)
    out[i] = moe::roundTo(type, values.data()[i]);
  return result;
}

//===----------------------------------------------------------------------===//
// Bundles and presets
//===----------------------------------------------------------------------===//

py::object compileBundle(const Module &layer, py::handle directory,
                         py::handle tokensMaxArg, py::handle blockMArg,
                         const std::string &configDatabase,
                         const std::string &device, py::handle numSMsArg,
                         const std::string &chip, const std::string &features,
                         const std::string &toolkit, py::handle tokenBucketsArg,
                         const std::string &phase) {
  int64_t tokensMax = moe_python::int64Argument(tokensMaxArg, "tokens_max");
  int64_t blockM = moe_python::int64Argument(blockMArg, "block_m");
  int64_t numSMs = moe_python::int64Argument(numSMsArg, "num_sms");
  for (auto [name, value, least, most] :
       {std::tuple<llvm::StringRef, int64_t, int64_t, int64_t>{
            "tokens_max", tokensMax, 1, moe::kMaxSize},
        {"block_m", blockM, 0, moe::kMaxSize},
        {"num_sms", numSMs, 1, moe::kMaxMultiprocessors}})
    if (std::optional<std::string> bad =
            moe::checkSizeOption(name, value, least, most))
      throw py::value_error(*bad);
  SmallVector<int64_t> tokenBuckets;
  for (py::handle bucket : py::iter(tokenBucketsArg))
    tokenBuckets.push_back(moe_python::int64Argument(bucket, "a token bucket"));
  moe::BundleOptions options;
  options.pipeline.tokensMax = tokensMax;
  options.pipeline.blockM = blockM;
  options.pipeline.configDatabase = configDatabase;
  options.pipeline.device = device;
  options.pipeline.numSMs = numSMs;
  options.pipeline.chip = chip;
  options.pipeline.features = features;
  options.pipeline.phase = phase;
  options.toolkit = toolkit;
  options.tokenBuckets = std::move(tokenBuckets);
  std::string path = fsPath(directory);
  // A copy whose diagnostics this call collects.
  std::unique_ptr<Module> work = layer.clone();
  DiagnosticCollector diagnostics(work->getContext().get(), work->getSources());
  if (llvm::Error error = moe::compileBundle(work->get(), options, path))
    throw toException(std::move(error));
  // What is left are warnings, such as moe-tile's heuristic fallback.
  std::string warnings = diagnostics.take("");
  if (!warnings.empty() &&
      PyErr_WarnEx(PyExc_UserWarning, warnings.c_str(), 1) != 0)
    throw py::error_already_set();
  return py::module_::import("os").attr("fsdecode")(py::bytes(path));
}

/// The dtype of a layer's activations and weights.
std::string checkLayerDtype(const std::string &dtype) {
  if (dtype != "bf16" && dtype != "f16" && dtype != "f32")
    throw py::value_error("unknown layer dtype '" + dtype +
                          "' (bf16, f16, f32)");
  return dtype;
}

/// The router parameters `params` ("scoring = softmax, top_k = 2") as a
/// dict of every field, defaults included, read through the attribute
/// parser so that Python sees what the compiler sees.
py::dict routerFields(MLIRContext *context, llvm::StringRef params) {
  auto router = dyn_cast_or_null<moe::RouterAttr>(
      parseAttribute(("#moe.router<" + params + ">").str(), context));
  if (!router)
    throw Error("cannot parse the router parameters '" + params.str() + "'");
  py::dict fields;
  fields["scoring"] = moe::stringifyScoring(router.getScoring()).str();
  fields["top_k"] = router.getTopK();
  fields["num_groups"] = router.getNumGroups();
  fields["topk_groups"] = router.getTopkGroups();
  fields["renormalize"] = router.getRenormalize();
  fields["routed_scaling_factor"] =
      router.getRoutedScalingFactor().convertToDouble();
  fields["num_shared_experts"] = router.getNumSharedExperts();
  return fields;
}

/// The clamped SwiGLU parameters `params` ("alpha = 1.702, limit = 7.0") as
/// (alpha, limit), read through the attribute parser; None when empty.
py::object swigluFields(MLIRContext *context, llvm::StringRef params) {
  if (params.empty())
    return py::none();
  auto swiglu = dyn_cast_or_null<moe::SwigluAttr>(
      parseAttribute(("#moe.swiglu<" + params + ">").str(), context));
  if (!swiglu)
    throw Error("cannot parse the swiglu parameters '" + params.str() + "'");
  return py::make_tuple(swiglu.getAlpha().convertToDouble(),
                        swiglu.getLimit().convertToDouble());
}

/// Each preset as a dict: name, sizes, correction_bias, the router's
/// fields, swiglu ((alpha, limit) of a clamped SwiGLU, or None) and
/// expert_biases.
py::list presetTable() {
  std::shared_ptr<MLIRContext> context = createContext();
  llvm::SourceMgr noSources;
  DiagnosticCollector diagnostics(context.get(), noSources);
  py::list table;
  for (const moe::Preset &preset : moe::getPresets()) {
    py::dict entry;
    entry["name"] = preset.name;
    entry["hidden_size"] = preset.hiddenSize;
    entry["intermediate_size"] = preset.intermediate;
    entry["num_experts"] = preset.numExperts;
    entry["correction_bias"] = preset.bias;
    entry["router"] = routerFields(context.get(), preset.router);
    entry["swiglu"] =
        swigluFields(context.get(), preset.swiglu ? preset.swiglu : "");
    entry["expert_biases"] = preset.expertBiases;
    table.append(entry);
  }
  return table;
}

} // namespace

PYBIND11_MODULE(_compiler, m) {
  m.doc() = "The moe compiler: IR, pass pipelines, the CPU path and bundles "
            "(see the moe_mlir package for the documented API).";
  moe_python::registerErrorTranslator();
  moe::registerMoePasses();

  py::class_<Module>(m, "Module", R"doc(
A module of moe IR (and any upstream dialect moe-opt knows), in its own
MLIR context.

``Module.parse(text)`` parses and verifies; ``str(module)`` prints it;
``run_pipeline`` transforms it in place. Failures raise moe_mlir.Error with
MLIR's diagnostics, located in the parsed text.
)doc")
      .def_static("parse", &Module::parse, py::arg("text"),
                  py::arg("name") = "<string>",
                  "Parses and verifies MLIR text; `name` is the buffer name "
                  "that locations show. Raises moe_mlir.Error with the "
                  "diagnostics.")
      .def("verify", &Module::verify,
           "Raises moe_mlir.Error with the verifier's diagnostics unless the "
           "module is valid.")
      .def("run_pipeline", &Module::runPipeline, py::arg("pipeline"),
           "Runs a textual pass pipeline as moe-opt takes it "
           "('moe-decompose', 'moe-cpu-pipeline', "
           "'func.func(canonicalize),cse', or 'builtin.module(...)') on the "
           "module, in place. Raises moe_mlir.Error for an unknown pass or a "
           "failing one; the module then stays as it was.")
      .def("clone", &Module::clone, "An independent copy of the module.")
      .def("to_string", &Module::print, py::arg("generic") = false,
           py::arg("debug_info") = false,
           "The module as text; generic=True prints the generic op form, "
           "debug_info=True the locations.")
      .def("__str__",
           [](const Module &module) { return module.print(false, false); });

  py::class_<CpuFunction>(m, "CpuFunction", R"doc(
A function of tensors compiled for the CPU (moe-cpu-pipeline, then MLIR's
ExecutionEngine), called with numpy arrays.

Arguments: floating-point tensors (f32, bf16, f16) take any floating numpy
array, rounded to the element type (through float32; numpy has no bf16);
i32 tensors take integer arrays. Every `?` dimension is the token count and
must be the same in all arguments. Results: f32 and bf16 come back as
float32 arrays (bf16 values widened exactly), f16 as float16, i32 as int32;
one result as an array, several as a tuple.

Wrong array types raise TypeError, wrong shapes ValueError, and failures of
the compiler moe_mlir.Error.
)doc")
      .def_static("compile", &CpuFunction::compile, py::arg("module"),
                  py::arg("entry") = "",
                  "Compiles function `entry` of `module` (the module's only "
                  "function when empty).")
      .def_static(
          "compile",
          [](const std::string &text, const std::string &entry) {
            return CpuFunction::compile(*Module::parse(text, "<string>"),
                                        entry);
          },
          py::arg("module"), py::arg("entry") = "",
          "Parses MLIR text and compiles function `entry` of it.")
      .def("__call__", &CpuFunction::run, "Runs the function on arrays.")
      .def_property_readonly("name", &CpuFunction::getName)
      .def_property_readonly(
          "arguments",
          [](const CpuFunction &function) { return function.describe(false); },
          "(dtype, shape) of each argument; None in a shape is the token "
          "count.")
      .def_property_readonly(
          "results",
          [](const CpuFunction &function) { return function.describe(true); },
          "(dtype, shape) of each result.")
      .def("__repr__", [](const CpuFunction &function) {
        return "<moe_mlir.CpuFunction " + function.signature() + ">";
      });

  // Both overloads take the same keyword arguments.
  auto bundleOptions = [](auto... first) {
    return std::make_tuple(
        first..., py::kw_only(), py::arg("tokens_max") = 16384,
        py::arg("block_m") = 0, py::arg("config_db") = "",
        py::arg("device") = moe::kDefaultDeviceName,
        py::arg("num_sms") = moe::kDefaultNumSMs,
        py::arg("chip") = moe::kDefaultChip,
        py::arg("features") = moe::kDefaultFeatures,
        py::arg("toolkit") = moe::kDefaultCudaToolkit,
        py::arg("token_buckets") = py::tuple(), py::arg("phase") = "");
  };
  std::apply(
      [&](auto... arguments) {
        m.def("compile_bundle", &compileBundle, arguments...,
              "Compiles a Module's layer to a bundle directory, written "
              "whole or not at all (beside it, then renamed into place; an "
              "existing bundle or empty directory is replaced, anything "
              "else refused); config_db "
              "names a tuned config database consulted before the shipped "
              "one, for `device`; num_sms is the target's multiprocessor "
              "count (K splits and persistent grids fill it). The bundle has "
              "a variant per range of token counts: token_buckets, rising "
              "to tokens_max, are the token counts the variants choose their "
              "routing blocks, tiles and K splits for; empty (the default), "
              "the token counts where those choices change, so that every "
              "token count runs the kernels a bundle for it alone would; "
              "[tokens_max], one variant. `phase` (dispatch, experts or "
              "combine) is the phase of an expert-parallel layer to compile.");
        m.def(
            "compile_bundle",
            [](const std::string &text, py::handle directory,
               py::handle tokensMax, py::handle blockM,
               const std::string &configDatabase, const std::string &device,
               py::handle numSMs, const std::string &chip,
               const std::string &features, const std::string &toolkit,
               py::handle tokenBuckets, const std::string &phase) {
              return compileBundle(*Module::parse(text, "<string>"), directory,
                                   tokensMax, blockM, configDatabase, device,
                                   numSMs, chip, features, toolkit,
                                   tokenBuckets, phase);
            },
            arguments...,
            "Compiles the layer in MLIR text to a bundle "
            "directory.");
      },
      bundleOptions(py::arg("layer"), py::arg("directory")));

  m.def("round_to", &roundTo, py::arg("values"), py::arg("dtype"),
        "`values` rounded to the nearest values of `dtype` (f32, bf16, f16; "
        "ties to even), as float32.");

  m.def("preset_table", &presetTable,
        "Each preset's name, sizes, correction_bias, router fields, swiglu "
        "and expert_biases.");
  m.def(
      "layer_part_source",
      [](const std::string &part, int64_t hiddenSize, int64_t intermediateSize,
         int64_t numExperts, int64_t topK, int64_t numSharedExperts,
         const std::string &router, bool correctionBias,
         const std::string &dtype, int64_t blockM,
         const std::string &quantization, const std::string &swiglu,
         bool expertBiases, int64_t world, int64_t rank, int64_t tokens) {
        moe::LayerDescription layer{
            "",           hiddenSize,     intermediateSize,
            numExperts,   topK,           numSharedExperts,
            router,       correctionBias, checkLayerDtype(dtype),
            quantization, swiglu,         expertBiases,
            world,        rank,           tokens};
        llvm::Expected<std::string> text =
            moe::getPartSource(layer, part, blockM);
        if (!text)
          throw py::value_error(llvm::toString(text.takeError()));
        return *text;
      },
      py::arg("part"), py::kw_only(), py::arg("hidden_size"),
      py::arg("intermediate_size"), py::arg("num_experts"), py::arg("top_k"),
      py::arg("num_shared_experts"), py::arg("router"),
      py::arg("correction_bias"), py::arg("dtype"), py::arg("block_m"),
      py::arg("quantization"), py::arg("swiglu") = "",
      py::arg("expert_biases") = false, py::arg("world") = 0,
      py::arg("rank") = 0, py::arg("tokens") = 0,
      "A part of a layer as moe-compile's --part names it: 'layer' (one "
      "moe.fused_moe), 'experts' (one moe.fused_experts), 'routing' (gate, "
      "route, combine), 'router' (gate), 'gemm1' or 'gemm2' (a grouped "
      "matmul); `quantization` as moe-compile's --quantization ('' for "
      "weights in `dtype`, else 'tensor', 'channel' or 'block': fp8 weights "
      "and their scales, after the correction bias); `swiglu` the "
      "#moe.swiglu parameters of a clamped SwiGLU ('' for SiLU-and-mul), "
      "`expert_biases` whether the experts take biases (after the "
      "correction bias, before any scales); `world` > 0: rank `rank` of an "
      "expert-parallel layer over `world` ranks at `tokens` tokens a rank "
      "(part 'layer' only).");
}
