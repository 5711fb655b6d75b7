//===- moe-ir-fuzzer.cpp - Fuzz the parser, verifier and pipelines --------===//
//
// libFuzzer target: an input is MLIR text, checked against the source
// limits (moe/Support/SourceLimits.h), parsed and verified as moe-opt does,
// printed, and run through moe-cpu-pipeline and through the moe half
// of moe-gpu-pipeline (its passes up to convert-moe-to-gpu) with its
// defaults and for one token (decode: K splits), each on a fresh copy. The
// upstream half that lowers the kernels to NVVM is left out: it would take
// two thirds of the time of each input. A diagnostic is no finding; a
// crash, an assertion, a sanitizer report or a hang is. Each configuration
// is part of one that moe-opt runs by name, so a finding replays as
//
//   moe-opt --moe-cpu-pipeline INPUT
//   moe-opt --moe-gpu-pipeline INPUT
//   moe-opt --moe-gpu-pipeline=tokens=1 INPUT
//
// (test/Fuzz/regressions.test does, for every input ever found).
//
//===----------------------------------------------------------------------===//

#include "moe/Pipelines/Pipelines.h"
#include "moe/Registration/Registration.h"
#include "moe/Support/SourceLimits.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

using namespace mlir;

namespace {

const DialectRegistry &registry() {
  static const DialectRegistry *dialects = [] {
    moe::registerMoePasses();
    auto *created = new DialectRegistry;
    moe::registerMoeDialects(*created);
    return created;
  }();
  return *dialects;
}

/// Runs the pipeline `build` adds on a copy of `module`; failure is fine.
void runPipeline(ModuleOp module,
                 llvm::function_ref<void(OpPassManager &)> build) {
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(module.getContext());
  build(pm);
  if (succeeded(pm.run(*copy)))
    copy->print(llvm::nulls());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // One context per input, so that no input sees another's uniqued
  // attributes; single-threaded, as libFuzzer runs one input at a time.
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  // MLIR's lexer needs a NUL after the text, as every file moe-opt reads
  // has (MemoryBuffer), and libFuzzer's input lacks.
  std::string text(reinterpret_cast<const char *>(data), size);
  if (llvm::Error tooDeep = moe::checkSource(text, "input")) {
    llvm::consumeError(std::move(tooDeep));
    return 0;
  }
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(text, ParserConfig(&context));
  if (!module)
    return 0;
  module->print(llvm::nulls());
  module->print(llvm::nulls(), OpPrintingFlags().printGenericOpForm());

  runPipeline(*module, [](OpPassManager &pm) { moe::buildMoeCpuPipeline(pm); });
  moe::MoeGpuPipelineOptions defaults;
  runPipeline(*module, [&](OpPassManager &pm) {
    moe::buildMoeToKernelsPipeline(pm, defaults);
  });
  moe::MoeGpuPipelineOptions decode;
  decode.tokens = 1;
  runPipeline(*module, [&](OpPassManager &pm) {
    moe::buildMoeToKernelsPipeline(pm, decode);
  });
  return 0;
}
