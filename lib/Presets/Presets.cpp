//===- Presets.cpp - The MoE layers of well-known models ------------------===//

#include "moe/Presets/Presets.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;

// Sizes and routing from the models' configs.
static const Preset kPresets[] = {
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0,
     "scoring = softmax, top_k = 2, renormalize = true", false},
    {"qwen3-30b-a3b", 2048, 768, 128, 8, 0,
     "scoring = softmax, top_k = 8, renormalize = true", false},
    {"deepseek-v3", 7168, 2048, 256, 8, 1,
     "scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4, "
     "renormalize = true, routed_scaling_factor = 2.5, num_shared_experts = 1",
     true},
    {"kimi-k2", 7168, 2048, 384, 8, 1,
     "scoring = sigmoid, top_k = 8, renormalize = true, "
     "routed_scaling_factor = 2.827, num_shared_experts = 1",
     true},
};

Preset Preset::shrunk(int64_t shrink) const {
  Preset result = *this;
  result.hiddenSize /= shrink;
  result.intermediate /= shrink;
  return result;
}

llvm::ArrayRef<Preset> mlir::moe::getPresets() { return kPresets; }

const Preset *mlir::moe::findPreset(llvm::StringRef name) {
  const Preset *found = llvm::find_if(
      kPresets, [&](const Preset &preset) { return name == preset.name; });
  return found == std::end(kPresets) ? nullptr : found;
}

std::string mlir::moe::presetNames() {
  std::string names;
  for (const Preset &preset : kPresets)
    names += (names.empty() ? "" : ", ") + std::string(preset.name);
  return names;
}

std::string mlir::moe::getLayerSource(const Preset &preset,
                                      llvm::StringRef dtype) {
  int64_t h = preset.hiddenSize, i = preset.intermediate;
  int64_t e = preset.numExperts, stored = e + preset.numSharedExperts;
  std::string x = llvm::formatv("tensor<?x{0}x{1}>", h, dtype);
  std::string l = llvm::formatv("tensor<?x{0}xf32>", e);
  std::string w13 =
      llvm::formatv("tensor<{0}x{1}x{2}x{3}>", stored, 2 * i, h, dtype);
  std::string w2 =
      llvm::formatv("tensor<{0}x{1}x{2}x{3}>", stored, h, i, dtype);
  std::string b = llvm::formatv("tensor<{0}xf32>", e);
  std::string biasArg = preset.bias ? ", %bias: " + b : "";
  std::string biasUse = preset.bias ? " bias(%bias)" : "";
  std::string biasType = preset.bias ? ", " + b : "";
  return llvm::formatv(
      "func.func @layer(%x: {0}, %logits: {1}, %w13: {2}, %w2: {3}{4}) -> {0} "
      "{{\n  %y = moe.fused_moe %x, %logits, %w13, %w2{5} "
      "activation(silu_and_mul) {{router = #moe.router<{6}>} : ({0}, {1}, "
      "{2}, {3}{7}) -> {0}\n  return %y : {0}\n}\n",
      x, l, w13, w2, biasArg, biasUse, preset.router, biasType);
}

std::string mlir::moe::getRoutingSource(const Preset &preset,
                                        llvm::StringRef dtype, int64_t blockM) {
  int64_t e = preset.numExperts, h = preset.hiddenSize;
  int64_t slots = preset.topK + preset.numSharedExperts;
  std::string l = llvm::formatv("tensor<?x{0}xf32>", e);
  std::string b = llvm::formatv("tensor<{0}xf32>", e);
  std::string rows = llvm::formatv("tensor<?x{0}x{1}x{2}>", slots, h, dtype);
  std::string out = llvm::formatv("tensor<?x{0}x{1}>", h, dtype);
  std::string w = llvm::formatv("tensor<?x{0}xf32>", slots);
  std::string ids = llvm::formatv("tensor<?x{0}xi32>", slots);
  std::string routing = "tensor<?xi32>, tensor<?xi32>, tensor<i32>";
  std::string results =
      llvm::formatv("{0}, {1}, {2}, {3}", w, ids, routing, out);
  return llvm::formatv(
      "func.func @routing(%logits: {0}{1}, %rows: {2}) -> ({3}) {{\n"
      "  %w, %ids = moe.gate %logits{4} {{router = #moe.router<{5}>} : "
      "({0}{6}) "
      "-> ({7}, {8})\n"
      "  %s, %e, %n = moe.route %ids {{num_experts = {9}, block_m = {10}} : "
      "({8}) -> ({11})\n"
      "  %y = moe.combine %rows : ({2}) -> {12}\n"
      "  return %w, %ids, %s, %e, %n, %y : {3}\n}\n",
      l, preset.bias ? ", %bias: " + b : "", rows, results,
      preset.bias ? " bias %bias" : "", preset.router,
      preset.bias ? ", " + b : "", w, ids, e + preset.numSharedExperts, blockM,
      routing, out);
}

std::string mlir::moe::getRouterSource(const Preset &preset) {
  int64_t e = preset.numExperts;
  int64_t slots = preset.topK + preset.numSharedExperts;
  std::string l = llvm::formatv("tensor<?x{0}xf32>", e);
  std::string b = llvm::formatv("tensor<{0}xf32>", e);
  std::string w = llvm::formatv("tensor<?x{0}xf32>", slots);
  std::string ids = llvm::formatv("tensor<?x{0}xi32>", slots);
  return llvm::formatv("func.func @router(%logits: {0}{1}) -> ({2}, {3}) {{\n"
                       "  %w, %ids = moe.gate %logits{4} {{router = "
                       "#moe.router<{5}>} : ({0}{6}) "
                       "-> ({2}, {3})\n  return %w, %ids : {2}, {3}\n}\n",
                       l, preset.bias ? ", %bias: " + b : "", w, ids,
                       preset.bias ? " bias %bias" : "", preset.router,
                       preset.bias ? ", " + b : "");
}

std::string mlir::moe::getGroupedMatmulSource(const Preset &preset,
                                              llvm::StringRef dtype,
                                              int64_t blockM, bool second) {
  int64_t h = preset.hiddenSize, i = preset.intermediate;
  int64_t stored = preset.numExperts + preset.numSharedExperts;
  int64_t slots = preset.topK + preset.numSharedExperts;
  std::string routing = "tensor<?xi32>, tensor<?xi32>, tensor<i32>";
  std::string attrs = llvm::formatv(
      "{{block_m = {0} : i64, num_slots = {1} : i64}", blockM, slots);
  std::string sorted = llvm::formatv("tensor<?x{0}x{1}>", i, dtype);
  if (!second) {
    std::string x = llvm::formatv("tensor<?x{0}x{1}>", h, dtype);
    std::string w13 =
        llvm::formatv("tensor<{0}x{1}x{2}x{3}>", stored, 2 * i, h, dtype);
    return llvm::formatv(
        "func.func @gemm1(%x: {0}, %w13: {1}, %sorted: tensor<?xi32>, "
        "%experts: tensor<?xi32>, %count: tensor<i32>) -> {2} {{\n"
        "  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count "
        "input(token) output(sorted) activation(silu_and_mul) {3} : ({0}, "
        "{1}, {4}) -> {2}\n  return %h : {2}\n}\n",
        x, w13, sorted, attrs, routing);
  }
  std::string w2 =
      llvm::formatv("tensor<{0}x{1}x{2}x{3}>", stored, h, i, dtype);
  std::string w = llvm::formatv("tensor<?x{0}xf32>", slots);
  std::string y = llvm::formatv("tensor<?x{0}x{1}x{2}>", slots, h, dtype);
  return llvm::formatv(
      "func.func @gemm2(%h: {0}, %w2: {1}, %sorted: tensor<?xi32>, "
      "%experts: tensor<?xi32>, %count: tensor<i32>, %weights: {2}) -> {3} "
      "{{\n  %y = moe.grouped_matmul %h, %w2, %sorted, %experts, %count "
      "routed_weights(%weights) input(sorted) output(slot) {4} : ({0}, {1}, "
      "{5}, {2}) -> {3}\n  return %y : {3}\n}\n",
      sorted, w2, w, y, attrs, routing);
}

llvm::Expected<std::string> mlir::moe::getPresetSource(llvm::StringRef name,
                                                       llvm::StringRef part,
                                                       int64_t shrink,
                                                       llvm::StringRef dtype,
                                                       int64_t blockM) {
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  const Preset *preset = findPreset(name);
  if (!preset)
    return error("unknown preset '" + name + "' (" + presetNames() + ")");
  if (dtype != "bf16" && dtype != "f16" && dtype != "f32")
    return error("unknown --dtype '" + dtype + "' (bf16, f16, f32)");
  Preset sized = preset->shrunk(shrink);
  if (part == "layer")
    return getLayerSource(sized, dtype);
  if (part == "routing")
    return getRoutingSource(sized, dtype, blockM);
  if (part == "router")
    return getRouterSource(sized);
  if (part == "gemm1" || part == "gemm2")
    return getGroupedMatmulSource(sized, dtype, blockM, part == "gemm2");
  return error("unknown --part '" + part +
               "' (layer, routing, router, gemm1, gemm2)");
}

std::string LayerSource::label() const {
  if (presetName.empty())
    return inputFile;
  return presetName + (shrink > 1 ? " (reduced)" : "");
}

OwningOpRef<ModuleOp> mlir::moe::parseLayerSource(const LayerSource &source,
                                                  MLIRContext &context,
                                                  llvm::SourceMgr &sourceMgr,
                                                  std::string &error) {
  if (source.presetName.empty() == source.inputFile.empty()) {
    error = "give either a layer file or --preset (see --help)";
    return nullptr;
  }
  OwningOpRef<ModuleOp> module;
  if (!source.presetName.empty()) {
    auto text = getPresetSource(source.presetName, source.part, source.shrink,
                                source.dtype, source.blockM);
    if (!text) {
      error = llvm::toString(text.takeError());
      return nullptr;
    }
    module = parseSourceString<ModuleOp>(*text, &context);
  } else {
    auto file = openInputFile(source.inputFile, &error);
    if (!file)
      return nullptr;
    sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  }
  if (!module)
    error = "could not parse or verify " + source.label();
  return module;
}
