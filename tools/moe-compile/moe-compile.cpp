//===- moe-compile.cpp - Compile an MoE layer to a kernel bundle ----------===//
//
// One command from a layer (an MLIR file, or a model preset) to a bundle
// directory that the runtime loads: kernels for one GPU (by default the
// H100 SXM of moe/Target/DefaultTarget.h) and their launch plan.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/Moe/IR/MoeLimits.h"
#include "moe/Dialect/Moe/Transforms/GemmHeuristic.h"
#include "moe/Presets/Presets.h"
#include "moe/Registration/Registration.h"
#include "moe/Target/BundleWriter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;
using namespace mlir::moe;
namespace cl = llvm::cl;

// Only these options show in --help: the LLVM back ends linked in register
// hundreds of their own, hidden with cl::HideUnrelatedOptions.
static cl::OptionCategory moeCompileCategory("moe-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("[layer.mlir]"),
                                      cl::init(""),
                                      cl::cat(moeCompileCategory));
static cl::opt<std::string> output("o", cl::desc("Bundle directory to write"),
                                   cl::value_desc("dir"), cl::init(""),
                                   cl::cat(moeCompileCategory));
static cl::opt<bool>
    listPresets("list-presets",
                cl::desc("Print the model presets' sizes and routers as JSON "
                         "(what moe-tune and the benchmarks size from)"),
                cl::init(false), cl::cat(moeCompileCategory));
// cl::desc keeps a reference: the text must outlive the option.
static const std::string presetHelp =
    "Model preset instead of a file: " + presetNames();
static cl::opt<std::string> presetName("preset", cl::desc(presetHelp),
                                       cl::init(""),
                                       cl::cat(moeCompileCategory));
static cl::opt<std::string> layerSizes(
    "layer-sizes",
    cl::desc("A layer of these sizes instead of a file, for its experts or "
             "grouped matmuls (--part experts, gemm1 or gemm2): "
             "experts=E,hidden=H,intermediate=I,top_k=K[,shared=X]"),
    cl::init(""), cl::cat(moeCompileCategory));
static cl::opt<bool>
    describe("describe",
             cl::desc("Print the layer's sizes, router, dtype and "
                      "quantization as JSON (a --list-presets object with "
                      "\"dtype\", and \"quantization\" for fp8 weights) "
                      "instead of compiling it"),
             cl::init(false), cl::cat(moeCompileCategory));
static cl::opt<bool> printSource(
    "print-source",
    cl::desc("Print the layer's MLIR (a preset's or sizes' part as "
             "generated, a file's as parsed) instead of compiling it"),
    cl::init(false), cl::cat(moeCompileCategory));
static cl::opt<std::string>
    part("part",
         cl::desc("Of the layer: 'layer' (moe.fused_moe), 'experts' "
                  "(moe.fused_experts: the layer given its routing), "
                  "'routing' (gate, route and combine), 'router' (gate), "
                  "'gemm1' (the w13 "
                  "grouped matmul with SiLU-and-mul) or 'gemm2' (the w2 "
                  "grouped matmul with routed weights)"),
         cl::init("layer"), cl::cat(moeCompileCategory));
static cl::opt<bool> reduced("reduced",
                             cl::desc("Shrink the hidden and intermediate "
                                      "sizes of a preset or sizes 32x"),
                             cl::init(false), cl::cat(moeCompileCategory));
static cl::opt<std::string> dtype("dtype",
                                  cl::desc("Element type of a preset or "
                                           "sizes: bf16, f16 or f32 (with "
                                           "--quantization, of the hidden "
                                           "states)"),
                                  cl::init("bf16"),
                                  cl::cat(moeCompileCategory));
static cl::opt<std::string> quantization(
    "quantization",
    cl::desc("Quantized weights of a preset or sizes, for --part layer, "
             "experts, gemm1 or gemm2: FP8 (e4m3, the GEMMs' rows in too) "
             "with fp32 scales per 'tensor' (expert), 'channel' (output row) "
             "or 'block' (128 x 128; the activations then scaled per token "
             "and 128 columns, else per token); 'tensor-static' or "
             "'channel-static' (those weights, the activations scaled by "
             "two static per-tensor scales, tensor<1xf32> w13 and w2 input "
             "scales after the weights' scales: vLLM's activation_scheme "
             "static); or 'mxfp4' (OCP MXFP4, e2m1 packed two per byte with "
             "an e8m0 scale per 32 values of K; the rows stay in --dtype)"),
    cl::init(""), cl::cat(moeCompileCategory));
static cl::opt<std::string> expertParallel(
    "expert-parallel",
    cl::desc("Rank R of a preset's or the sizes' layer split over W ranks by "
             "its routed experts, at --tokens-max tokens a rank: 'W,R' "
             "(docs/MULTI-GPU.md); compile one of its phases (--phase)"),
    cl::value_desc("W,R"), cl::init(""), cl::cat(moeCompileCategory));
static cl::opt<std::string> phase(
    "phase",
    cl::desc("The phase of an expert-parallel layer to compile: dispatch, "
             "experts or combine (docs/MULTI-GPU.md), at one variant for "
             "--tokens-max unless --token-buckets says otherwise"),
    cl::init(""), cl::cat(moeCompileCategory));
static cl::opt<int64_t> tokensMax("tokens-max",
                                  cl::desc("Largest token count to size for"),
                                  cl::init(16384), cl::cat(moeCompileCategory));
static cl::opt<std::string> tokenBuckets(
    "token-buckets",
    cl::desc("Token counts the bundle's variants choose their routing blocks, "
             "tiles and K splits for: 'auto' (1, 2, 3, 4, 6, 8, 12, ... up to "
             "--tokens-max; neighbours with the same kernels are one "
             "variant), 'max' (one variant, for --tokens-max) or a rising "
             "list such as 1,16,256"),
    cl::init("auto"), cl::cat(moeCompileCategory));
static cl::opt<int64_t> blockM(
    "block-m",
    cl::desc(
        "Rows per routing block (0: chosen for each variant's token count, 128 "
        "once the experts average 64 rows, else 64)"),
    cl::init(0), cl::cat(moeCompileCategory));
static cl::opt<int64_t>
    blockN("block-n",
           cl::desc("Accumulator columns per grouped-matmul block (0: "
                    "moe-tile's heuristic)"),
           cl::init(0), cl::cat(moeCompileCategory));
static cl::opt<int64_t>
    numStages("num-stages",
              cl::desc("Shared-memory stages of the grouped matmuls (0: "
                       "moe-tile's heuristic)"),
              cl::init(0), cl::cat(moeCompileCategory));
static cl::opt<std::string>
    configDatabase("config-db",
                   cl::desc("Tuned config database (JSON, written by "
                            "moe-tune) consulted before the shipped entries"),
                   cl::value_desc("file"), cl::init(""),
                   cl::cat(moeCompileCategory));
static cl::opt<std::string>
    device("device",
           cl::desc("CUDA device name the tuned configs are looked up for"),
           cl::init(kDefaultDeviceName), cl::cat(moeCompileCategory));
static cl::opt<int64_t>
    numSMs("num-sms",
           cl::desc("Multiprocessors of the target GPU: what K splits fill "
                    "and persistent grids are sized for"),
           cl::init(kDefaultNumSMs), cl::cat(moeCompileCategory));
static cl::opt<std::string> chip("chip", cl::desc("GPU architecture"),
                                 cl::init(kDefaultChip),
                                 cl::cat(moeCompileCategory));
static cl::opt<std::string>
    toolkit("toolkit",
            cl::desc("CUDA toolkit whose ptxas makes the cubin (PTX only when "
                     "it has none)"),
            cl::init(kDefaultCudaToolkit), cl::cat(moeCompileCategory));

/// Reads --expert-parallel's 'W,R' into `source` (nothing when empty); says
/// what is wrong with it.
static std::optional<std::string> parseExpertParallel(StringRef text,
                                                      LayerSource &source) {
  if (text.empty())
    return std::nullopt;
  auto [world, rank] = text.split(',');
  if (world.getAsInteger(10, source.world) ||
      rank.getAsInteger(10, source.rank) || source.world < 1 ||
      source.rank < 0 || source.rank >= source.world)
    return "--expert-parallel: expected 'W,R', the world size W >= 1 and a "
           "rank R in [0, W), got '" +
           text.str() + "'";
  source.tokens = tokensMax;
  return std::nullopt;
}

/// Reads --token-buckets into `buckets` (empty for 'auto'); says what is
/// wrong with it, if anything.
static std::optional<std::string>
parseTokenBuckets(StringRef text, int64_t tokensMax,
                  SmallVectorImpl<int64_t> &buckets) {
  if (text == "auto")
    return std::nullopt;
  if (text == "max") {
    buckets.push_back(tokensMax);
    return std::nullopt;
  }
  SmallVector<StringRef> items;
  text.split(items, ',');
  for (StringRef item : items) {
    int64_t bucket;
    if (item.trim().getAsInteger(10, bucket) || bucket < 1 ||
        bucket > tokensMax || (!buckets.empty() && bucket <= buckets.back()))
      return "expected 'auto', 'max' or rising token counts in [1, " +
             std::to_string(tokensMax) + "], got '" + text.str() + "'";
    buckets.push_back(bucket);
  }
  return std::nullopt;
}

static int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-compile: " << message << "\n";
  return 1;
}

/// The presets as a JSON array, one object per preset.
static void printPresets(llvm::raw_ostream &os) {
  llvm::json::Array presets;
  for (const Preset &preset : getPresets())
    presets.push_back(LayerDescription::of(preset, "").toJSON());
  os << llvm::formatv("{0:1}", llvm::json::Value(std::move(presets))) << "\n";
}

/// --describe: the layer of `source` as JSON.
static int printLayer(const LayerSource &source, MLIRContext &context,
                      llvm::SourceMgr &sourceMgr) {
  llvm::Expected<LayerDescription> layer =
      describeLayerSource(source, context, sourceMgr);
  if (!layer)
    return fail(llvm::toString(layer.takeError()));
  llvm::json::Object object = layer->toJSON();
  object["dtype"] = layer->dtype;
  llvm::outs() << llvm::formatv("{0:1}", llvm::json::Value(std::move(object)))
               << "\n";
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(moeCompileCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "moe-compile: compile an MoE layer to a kernel bundle\n\n"
      "  moe-compile --preset kimi-k2 --part routing --tokens-max 16384 -o "
      "kimi.moeb\n  moe-compile layer.mlir --tokens-max 4096 -o layer.moeb\n");
  if (listPresets) {
    printPresets(llvm::outs());
    return 0;
  }
  MLIRContext context;
  // Diagnostics quote the source line; the op dump would repeat it.
  context.printOpOnDiagnostic(false);
  DialectRegistry registry;
  registerMoeDialects(registry);
  context.appendDialectRegistry(registry);
  registerMoePasses();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  LayerSource source{inputFile,        presetName, part,       dtype,
                     reduced ? 32 : 1, blockM,     layerSizes, quantization};
  if (std::optional<std::string> bad =
          parseExpertParallel(expertParallel, source))
    return fail(*bad);
  if (describe)
    return printLayer(source, context, sourceMgr);
  if (output.empty() && !printSource)
    return fail("no bundle directory: give -o <dir>");
  for (auto [name, value, least, most] :
       {std::tuple<StringRef, int64_t, int64_t, int64_t>{
            "--tokens-max", tokensMax, 1, kMaxSize},
        {"--block-m", blockM, 0, kMaxSize},
        {"--num-sms", numSMs, 1, kMaxMultiprocessors}})
    if (std::optional<std::string> bad =
            checkSizeOption(name, value, least, most))
      return fail(*bad);
  // A layer's parts are written with their routing blocks: choose them here
  // as moe-decompose would.
  if (blockM == 0 && part != "layer") {
    llvm::Expected<LayerDescription> layer =
        describeLayerSource(source, context, sourceMgr);
    if (!layer)
      return fail(llvm::toString(layer.takeError()));
    source.blockM =
        chooseRoutingBlockM(tokensMax, layer->topK + layer->numSharedExperts,
                            layer->numExperts + layer->numSharedExperts,
                            layer->quantization == "block");
  }
  std::string error;
  OwningOpRef<ModuleOp> module =
      parseLayerSource(source, context, sourceMgr, error);
  if (!module)
    return fail(error);
  if (printSource) {
    module->print(llvm::outs());
    return 0;
  }

  BundleOptions options;
  options.pipeline.tokensMax = tokensMax;
  // Each variant of a layer chooses its routing blocks; a preset's parts
  // take them from their source.
  options.pipeline.blockM = blockM;
  options.pipeline.phase = phase;
  if (std::optional<std::string> bad =
          parseTokenBuckets(tokenBuckets, tokensMax, options.tokenBuckets))
    return fail("--token-buckets: " + *bad);
  // A phase's T is static (it sizes the exchange buffers): one variant, its
  // choices made for it, unless buckets are given.
  if (!phase.empty() && tokenBuckets == "auto")
    options.tokenBuckets = {tokensMax};
  options.pipeline.blockN = blockN;
  options.pipeline.numStages = numStages;
  options.pipeline.configDatabase = configDatabase;
  options.pipeline.device = device;
  options.pipeline.numSMs = numSMs;
  options.pipeline.chip = chip;
  options.toolkit = toolkit;
  if (llvm::Error error = compileBundle(*module, options, output))
    return fail(llvm::toString(std::move(error)));
  return 0;
}
