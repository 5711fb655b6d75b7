//===- CpuFunction.cpp - JIT a function of moe ops on the host ------------===//

#include "moe/CpuJit/CpuFunction.h"
#include "moe/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdlib>
#include <cstring>

using namespace mlir;
using namespace mlir::moe;

namespace {
llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The layout of a memref descriptor of any rank as the C interface passes
/// it: allocated and aligned pointers, offset, then sizes and strides.
struct Descriptor {
  std::vector<int64_t> words;

  explicit Descriptor(int64_t rank) : words(3 + 2 * rank) {}
  static Descriptor forTensor(const HostTensor &tensor) {
    int64_t rank = tensor.shape.size();
    Descriptor descriptor(rank);
    auto base = reinterpret_cast<int64_t>(tensor.bytes.data());
    descriptor.words[0] = descriptor.words[1] = base;
    int64_t stride = 1;
    for (int64_t dim = rank - 1; dim >= 0; --dim) {
      descriptor.words[3 + dim] = tensor.shape[dim];
      descriptor.words[3 + rank + dim] = stride;
      stride *= tensor.shape[dim];
    }
    return descriptor;
  }
};

// Half-precision conversions the JIT may call when the host has no F16C.
extern "C" float moeExtendHalfToFloat(uint16_t half) {
  HostTensor tensor(ElementType::F16, {1});
  std::memcpy(tensor.bytes.data(), &half, 2);
  return tensor.toFloats()[0];
}
extern "C" uint16_t moeTruncateFloatToHalf(float value) {
  HostTensor tensor = HostTensor::fromFloats(ElementType::F16, {1}, {value});
  uint16_t half;
  std::memcpy(&half, tensor.bytes.data(), 2);
  return half;
}
} // namespace

FailureOr<ElementType> mlir::moe::getHostElementType(Type type) {
  if (type.isF32())
    return ElementType::F32;
  if (type.isBF16())
    return ElementType::BF16;
  if (type.isF16())
    return ElementType::F16;
  if (type.isSignlessInteger(32))
    return ElementType::I32;
  if (isa<Float8E4M3FNType>(type))
    return ElementType::F8E4M3FN;
  if (type.isSignlessInteger(8))
    return ElementType::I8;
  if (isa<Float8E8M0FNUType>(type))
    return ElementType::F8E8M0FNU;
  return failure();
}

CpuFunction::~CpuFunction() = default;

llvm::Expected<std::unique_ptr<CpuFunction>>
CpuFunction::compile(ModuleOp module, llvm::StringRef entry) {
  func::FuncOp function;
  for (auto candidate : module.getOps<func::FuncOp>()) {
    if (candidate.isDeclaration() ||
        (!entry.empty() && candidate.getName() != entry))
      continue;
    if (function)
      return makeError("the module has several functions; name the entry");
    function = candidate;
  }
  if (!function)
    return makeError(entry.empty() ? "the module has no function"
                                   : "no function named '" + entry + "'");

  std::unique_ptr<CpuFunction> compiled(new CpuFunction());
  compiled->name = function.getName().str();
  auto describe = [](TypeRange types, std::vector<Signature> &signature,
                     llvm::StringRef what) -> llvm::Error {
    for (Type type : types) {
      auto tensorType = dyn_cast<RankedTensorType>(type);
      FailureOr<ElementType> elementType =
          tensorType ? getHostElementType(tensorType.getElementType())
                     : FailureOr<ElementType>(failure());
      if (failed(elementType)) {
        std::string text;
        llvm::raw_string_ostream os(text);
        os << "unsupported " << what << " type " << type
           << " (ranked tensors of f32, bf16, f16 or i32 only)";
        return makeError(text);
      }
      signature.push_back(
          {*elementType, std::vector<int64_t>(tensorType.getShape().begin(),
                                              tensorType.getShape().end())});
    }
    return llvm::Error::success();
  };
  if (llvm::Error error = describe(function.getArgumentTypes(),
                                   compiled->arguments, "argument"))
    return std::move(error);
  if (llvm::Error error =
          describe(function.getResultTypes(), compiled->results, "result"))
    return std::move(error);

  OwningOpRef<ModuleOp> lowered(module.clone());
  for (auto candidate : lowered->getOps<func::FuncOp>())
    if (candidate.getName() == compiled->name)
      candidate->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                         UnitAttr::get(module.getContext()));
  PassManager pm(module.getContext());
  mlir::moe::buildMoeCpuPipeline(pm);
  std::string diagnostics;
  {
    llvm::raw_string_ostream os(diagnostics);
    ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
      os << d.getLocation() << ": " << d << "\n";
      return success();
    });
    if (failed(pm.run(*lowered)))
      return makeError("moe-cpu-pipeline failed:\n" + diagnostics);
  }

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto optimize = makeOptimizingTransformer(
      /*optLevel=*/3, /*sizeLevel=*/0, /*targetMachine=*/nullptr);
  ExecutionEngineOptions options;
  options.transformer = optimize;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  auto engine = ExecutionEngine::create(*lowered, options);
  if (!engine)
    return engine.takeError();
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    auto add = [&](const char *name, auto *function) {
      symbols[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(function),
                                 llvm::JITSymbolFlags::Exported};
    };
    add("__extendhfsf2", &moeExtendHalfToFloat);
    add("__truncsfhf2", &moeTruncateFloatToHalf);
    return symbols;
  });
  compiled->engine = std::move(*engine);
  return std::move(compiled);
}

llvm::Expected<std::vector<HostTensor>>
CpuFunction::run(const std::vector<HostTensor> &inputs) const {
  if (inputs.size() != arguments.size())
    return makeError("'" + name + "' takes " + llvm::Twine(arguments.size()) +
                     " arguments, got " + llvm::Twine(inputs.size()));
  int64_t dynamicSize = ShapedType::kDynamic;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Signature &expected = arguments[i];
    const HostTensor &input = inputs[i];
    auto mismatch = [&](const llvm::Twine &why) {
      return makeError("argument #" + llvm::Twine(i) + " of '" + name +
                       "': " + why + " (got " + input.typeString() + ")");
    };
    if (input.type != expected.type)
      return mismatch(llvm::Twine("expected element type ") +
                      elementTypeName(expected.type));
    if (input.shape.size() != expected.shape.size())
      return mismatch("expected rank " + llvm::Twine(expected.shape.size()));
    if (static_cast<int64_t>(input.bytes.size()) !=
        input.numElements() * elementTypeBytes(input.type))
      return mismatch("its byte size does not match its shape");
    for (size_t d = 0; d < input.shape.size(); ++d) {
      int64_t size = input.shape[d], want = expected.shape[d];
      if (size < 0)
        return mismatch("negative size");
      if (!ShapedType::isDynamic(want)) {
        if (size != want)
          return mismatch("dimension " + llvm::Twine(d) + " must be " +
                          llvm::Twine(want));
        continue;
      }
      // Every `?` is the token count: the loops trust them to agree.
      if (!ShapedType::isDynamic(dynamicSize) && size != dynamicSize)
        return mismatch("dynamic dimension " + llvm::Twine(d) +
                        " must equal the other dynamic sizes (" +
                        llvm::Twine(dynamicSize) + ")");
      dynamicSize = size;
    }
  }

  std::vector<Descriptor> argumentDescriptors;
  for (const HostTensor &input : inputs)
    argumentDescriptors.push_back(Descriptor::forTensor(input));
  // Results come back through one pointer: a descriptor, or a struct of
  // descriptors (all 8-byte fields, so laid out back to back).
  std::vector<int64_t> resultWords;
  std::vector<size_t> resultOffsets;
  for (const Signature &result : results) {
    resultOffsets.push_back(resultWords.size());
    resultWords.resize(resultWords.size() + 3 + 2 * result.shape.size());
  }
  void *resultPointer = resultWords.data();
  std::vector<void *> descriptorPointers;
  for (Descriptor &descriptor : argumentDescriptors)
    descriptorPointers.push_back(descriptor.words.data());
  llvm::SmallVector<void *> packed;
  if (!results.empty())
    packed.push_back(&resultPointer);
  for (void *&pointer : descriptorPointers)
    packed.push_back(&pointer);
  if (llvm::Error error = engine->invokePacked("_mlir_ciface_" + name, packed))
    return std::move(error);

  std::vector<HostTensor> outputs;
  for (size_t i = 0; i < results.size(); ++i) {
    const int64_t *words = resultWords.data() + resultOffsets[i];
    int64_t rank = results[i].shape.size();
    HostTensor output(results[i].type,
                      std::vector<int64_t>(words + 3, words + 3 + rank));
    // An empty result (T = 0) may have null pointers, which memcpy must not
    // be given even for no bytes.
    auto *aligned = reinterpret_cast<const uint8_t *>(words[1]);
    if (!output.bytes.empty())
      std::memcpy(output.bytes.data(),
                  aligned + words[2] * elementTypeBytes(output.type),
                  output.bytes.size());
    outputs.push_back(std::move(output));
    // The result buffers are fresh allocations of the compiled code.
    std::free(reinterpret_cast<void *>(words[0]));
  }
  return outputs;
}
