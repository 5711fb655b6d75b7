//===- Presets.cpp - The MoE layers of well-known models ------------------===//

#include "moe/Presets/Presets.h"

#include "moe/Dialect/Moe/IR/MoeLimits.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Support/SourceLimits.h"

#include "mlir/Parser/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::moe;

// Sizes and routing from the models' configs.
// gpt-oss's router is a linear with bias, top-4 of its logits and a softmax
// over those four: moe.gate's softmax, top-4 and renormalize select the same
// experts (DESIGN.md, section 8, says when they may not).
static const Preset kPresets[] = {
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0,
     "scoring = softmax, top_k = 2, renormalize = true", false, nullptr, false},
    {"qwen3-30b-a3b", 2048, 768, 128, 8, 0,
     "scoring = softmax, top_k = 8, renormalize = true", false, nullptr, false},
    {"deepseek-v3", 7168, 2048, 256, 8, 1,
     "scoring = sigmoid, top_k = 8, num_groups = 8, topk_groups = 4, "
     "renormalize = true, routed_scaling_factor = 2.5, num_shared_experts = 1",
     true, nullptr, false},
    {"kimi-k2", 7168, 2048, 384, 8, 1,
     "scoring = sigmoid, top_k = 8, renormalize = true, "
     "routed_scaling_factor = 2.827, num_shared_experts = 1",
     true, nullptr, false},
    {"gpt-oss-20b", 2880, 2880, 32, 4, 0,
     "scoring = softmax, top_k = 4, renormalize = true", false,
     "alpha = 1.702, limit = 7.0", true},
    {"gpt-oss-120b", 2880, 2880, 128, 4, 0,
     "scoring = softmax, top_k = 4, renormalize = true", false,
     "alpha = 1.702, limit = 7.0", true},
};

LayerDescription LayerDescription::of(const Preset &preset,
                                      llvm::StringRef dtype) {
  return {preset.name,         preset.hiddenSize,
          preset.intermediate, preset.numExperts,
          preset.topK,         preset.numSharedExperts,
          preset.router,       preset.bias,
          dtype.str(),
          /*quantization=*/"", preset.swiglu ? preset.swiglu : "",
          preset.expertBiases};
}

Preset LayerDescription::preset() const {
  return {name.c_str(),   hiddenSize, intermediate,
          numExperts,     topK,       numSharedExperts,
          router.c_str(), bias,       swiglu.empty() ? nullptr : swiglu.c_str(),
          expertBiases};
}

llvm::json::Object LayerDescription::toJSON() const {
  llvm::json::Object object{{"hidden", hiddenSize},
                            {"intermediate", intermediate},
                            {"experts", numExperts},
                            {"top_k", topK},
                            {"shared", numSharedExperts}};
  if (!name.empty())
    object["name"] = name;
  if (!router.empty()) {
    object["router"] = router;
    object["bias"] = bias;
  }
  if (!quantization.empty())
    object["quantization"] = quantization;
  if (!swiglu.empty())
    object["swiglu"] = swiglu;
  if (expertBiases)
    object["expert_biases"] = true;
  return object;
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

/// The fp8 scale blocks of the generated layers: the checkpoints'.
static constexpr int64_t kScaleBlock = 128;

/// The MXFP4 block: 32 values of K share an e8m0 scale.
static constexpr int64_t kMxBlock = 32;

/// What ends a --quantization of fp8 weights whose activations have static
/// per-tensor scales (#moe.quantization's static_tensor): "tensor-static".
static constexpr llvm::StringLiteral kStaticSuffix = "-static";

namespace {
/// A --quantization: #moe.quantization's weight scaling ("" for weights in
/// the layer's dtype) and whether the caller gives the activations' scales.
struct Scheme {
  explicit Scheme(llvm::StringRef quantization)
      : weights(quantization),
        staticActivations(weights.consume_back(kStaticSuffix)) {}

  llvm::StringRef weights;
  bool staticActivations;
};
} // namespace

/// The type of the scales of quantized weights [E, N, K] scaled per
/// `scaling`: fp32 in blocks of kScaleBlock for fp8, e8m0 per kMxBlock values
/// of K for MXFP4 (QuantizationAttr::getWeightScalesShape, which needs a
/// context).
static std::string weightScalesType(llvm::StringRef scaling, int64_t e,
                                    int64_t n, int64_t k) {
  if (scaling == "mxfp4")
    return llvm::formatv("tensor<{0}x{1}x{2}xf8E8M0FNU>", e, n,
                         llvm::divideCeil(k, kMxBlock));
  if (scaling == "tensor")
    return llvm::formatv("tensor<{0}xf32>", e);
  if (scaling == "channel")
    return llvm::formatv("tensor<{0}x{1}xf32>", e, n);
  return llvm::formatv("tensor<{0}x{1}x{2}xf32>", e,
                       llvm::divideCeil(n, kScaleBlock),
                       llvm::divideCeil(k, kScaleBlock));
}

namespace {
/// Optional operands in a source (scales, biases): the function's
/// arguments, the op's use of them and their types in the op's signature;
/// empty where there are none.
struct ScalesText {
  std::string args, use, types;
};

/// The types of a layer's hidden states [?, H] and expert weights
/// [E+X, 2I, H] and [E+X, H, I] (MXFP4: two values of K per i8) in the
/// sources; for quantized weights also their scales, and the text the layer
/// op adds for them.
struct LayerTypes {
  /// The types of a layer of `preset` holding `stored` experts (all E + X
  /// when 0) at `tokens` tokens (dynamic when 0).
  LayerTypes(const Preset &preset, llvm::StringRef dtype,
             llvm::StringRef quantization, int64_t stored = 0,
             int64_t tokens = 0) {
    int64_t h = preset.hiddenSize, i = preset.intermediate;
    if (!stored)
      stored = preset.numExperts + preset.numSharedExperts;
    tokenDim = tokens ? std::to_string(tokens) : "?";
    Scheme scheme(quantization);
    quantization = scheme.weights;
    mxfp4 = quantization == "mxfp4";
    int64_t packing = mxfp4 ? 2 : 1;
    llvm::StringRef weights = quantization.empty() ? dtype
                              : mxfp4              ? "i8"
                                                   : "f8E4M3FN";
    hidden = llvm::formatv("tensor<{0}x{1}x{2}>", tokenDim, h, dtype);
    w13 = llvm::formatv("tensor<{0}x{1}x{2}x{3}>", stored, 2 * i, h / packing,
                        weights);
    w2 = llvm::formatv("tensor<{0}x{1}x{2}x{3}>", stored, h, i / packing,
                       weights);
    if (preset.swiglu) {
      activation = "clamped_swiglu";
      swiglu = llvm::formatv("swiglu = #moe.swiglu<{0}>", preset.swiglu);
    }
    if (preset.expertBiases) {
      w13Bias = llvm::formatv("tensor<{0}x{1}x{2}>", stored, 2 * i, dtype);
      w2Bias = llvm::formatv("tensor<{0}x{1}x{2}>", stored, h, dtype);
      biases = {
          llvm::formatv(", %w13_bias: {0}, %w2_bias: {1}", w13Bias, w2Bias),
          " biases(%w13_bias, %w2_bias)", ", " + w13Bias + ", " + w2Bias};
    }
    if (quantization.empty())
      return;
    w13Scales = weightScalesType(quantization, stored, 2 * i, h);
    w2Scales = weightScalesType(quantization, stored, h, i);
    scales = {llvm::formatv(", %w13_scales: {0}, %w2_scales: {1}", w13Scales,
                            w2Scales),
              " scales(%w13_scales, %w2_scales)",
              ", " + w13Scales + ", " + w2Scales};
    // Static activation scales are the layer op's last operands, one f32 per
    // GEMM input; the grouped matmuls get them broadcast to rows, as
    // moe.quantize makes them.
    if (scheme.staticActivations) {
      scales.args += ", %w13_input_scale: tensor<1xf32>, %w2_input_scale: "
                     "tensor<1xf32>";
      scales.use += " input_scales(%w13_input_scale, %w2_input_scale)";
      scales.types += ", tensor<1xf32>, tensor<1xf32>";
    }
    block = quantization == "block";
    int64_t blockSize = block ? kScaleBlock : mxfp4 ? kMxBlock : 0;
    attribute = llvm::formatv(
        "quantization = #moe.quantization<weights = {0}, activations = {1}{2}>",
        quantization,
        scheme.staticActivations ? "static_tensor"
        : block                  ? "token_group"
        : mxfp4                  ? "none"
                                 : "token",
        blockSize ? llvm::formatv(", block_size = {0}", blockSize).str() : "");
  }

  /// The scales of a grouped matmul of these weights (scales
  /// `weightScales`) on quantized activations %`name` [?, k], scaled as the
  /// weights' quantization pairs them (per token and kScaleBlock columns for
  /// block, else per token), after the op's other operands.
  ScalesText gemmScales(llvm::StringRef name, int64_t k,
                        llvm::StringRef weightScales) const {
    if (attribute.empty())
      return {};
    // MXFP4 leaves the activations unquantized.
    if (mxfp4)
      return {llvm::formatv(", %w_scales: {0}", weightScales),
              " weight_scales(%w_scales)", ", " + weightScales.str()};
    std::string type = llvm::formatv(
        "tensor<?x{0}xf32>", block ? llvm::divideCeil(k, kScaleBlock) : 1);
    return {llvm::formatv(", %{0}_scales: {1}, %w_scales: {2}", name, type,
                          weightScales),
            llvm::formatv(" scales(%{0}_scales, %w_scales)", name),
            ", " + type + ", " + weightScales.str()};
  }

  /// The attributes of a layer op or a grouped matmul after `first`: the
  /// activation's parameters and the quantization, where there are.
  std::string attributes(std::string first = "") const {
    for (const std::string &attr : {swiglu, attribute})
      if (!attr.empty())
        first += (first.empty() ? "" : ", ") + attr;
    return first;
  }

  /// A grouped matmul's bias `name` of type `type` (empty without expert
  /// biases).
  ScalesText gemmBias(llvm::StringRef name, llvm::StringRef type) const {
    if (type.empty())
      return {};
    return {llvm::formatv(", %{0}: {1}", name, type),
            llvm::formatv(" bias(%{0})", name), ", " + type.str()};
  }

  std::string tokenDim, hidden, w13, w2;
  std::string activation = "silu_and_mul";
  // Empty for SiLU-and-mul, and without expert biases.
  std::string swiglu, w13Bias, w2Bias;
  // Empty for weights in the layer's dtype.
  std::string w13Scales, w2Scales, attribute;
  // The layer op's: both weights' scales, and the expert biases.
  ScalesText scales, biases;
  bool block = false, mxfp4 = false;
};
} // namespace

namespace {
/// The function of one moe.fused_moe of `types` whose attributes start with
/// its router and then `parallel` (empty for the whole layer).
std::string layerFunction(const Preset &preset, const LayerTypes &types,
                          llvm::StringRef parallel) {
  int64_t e = preset.numExperts;
  std::string l = llvm::formatv("tensor<{0}x{1}xf32>", types.tokenDim, e);
  std::string b = llvm::formatv("tensor<{0}xf32>", e);
  std::string biasArg = preset.bias ? ", %bias: " + b : "";
  std::string biasUse = preset.bias ? " bias(%bias)" : "";
  std::string biasType = preset.bias ? ", " + b : "";
  std::string attributes =
      types.attributes("router = #moe.router<" + std::string(preset.router) +
                       ">" + (parallel.empty() ? "" : ", " + parallel.str()));
  return llvm::formatv(
      "func.func @layer(%x: {0}, %logits: {1}, %w13: {2}, %w2: "
      "{3}{4}{11}{5}) -> {0} {{\n  %y = moe.fused_moe %x, %logits, %w13, "
      "%w2{6}{12}{7} activation({14}) {{{8}} : ({0}, {1}, {2}, "
      "{3}{9}{13}{10}) -> {0}\n  return %y : {0}\n}\n",
      types.hidden, l, types.w13, types.w2, biasArg, types.scales.args, biasUse,
      types.scales.use, attributes, biasType, types.scales.types,
      types.biases.args, types.biases.use, types.biases.types,
      types.activation);
}
} // namespace

std::string mlir::moe::getLayerSource(const Preset &preset,
                                      llvm::StringRef dtype,
                                      llvm::StringRef quantization) {
  return layerFunction(preset, LayerTypes(preset, dtype, quantization), "");
}

std::string mlir::moe::getExpertParallelLayerSource(
    const Preset &preset, llvm::StringRef dtype, llvm::StringRef quantization,
    ExpertParallelPart part) {
  int64_t local = preset.numExperts / part.world + preset.numSharedExperts;
  return layerFunction(
      preset, LayerTypes(preset, dtype, quantization, local, part.tokens),
      llvm::formatv("expert_parallel = #moe.expert_parallel<world = {0}, "
                    "rank = {1}>",
                    part.world, part.rank)
          .str());
}

std::string mlir::moe::getExpertsSource(const Preset &preset,
                                        llvm::StringRef dtype,
                                        llvm::StringRef quantization) {
  int64_t slots = preset.topK + preset.numSharedExperts;
  LayerTypes types(preset, dtype, quantization);
  std::string ids = llvm::formatv("tensor<?x{0}xi32>", slots);
  std::string w = llvm::formatv("tensor<?x{0}xf32>", slots);
  std::string attributes = types.attributes();
  if (!attributes.empty())
    attributes = " {" + attributes + "}";
  return llvm::formatv(
      "func.func @experts(%x: {0}, %ids: {1}, %weights: {2}, %w13: {3}, "
      "%w2: {4}{9}{5}) -> {0} {{\n  %y = moe.fused_experts %x, %ids, "
      "%weights, %w13, %w2{10}{6} activation({12}){7} : ({0}, {1}, {2}, {3}, "
      "{4}{11}{8}) -> {0}\n  return %y : {0}\n}\n",
      types.hidden, ids, w, types.w13, types.w2, types.scales.args,
      types.scales.use, attributes, types.scales.types, types.biases.args,
      types.biases.use, types.biases.types, types.activation);
}

std::string mlir::moe::getRoutingSource(const Preset &preset,
                                        llvm::StringRef dtype, int64_t blockM) {
  int64_t e = preset.numExperts, h = preset.hiddenSize;
  int64_t slots = preset.topK + preset.numSharedExperts;
  std::string l = llvm::formatv("tensor<?x{0}xf32>", e);
  std::string b = llvm::formatv("tensor<{0}xf32>", e);
  std::string rows = llvm::formatv("tensor<?x{0}x{1}x{2}>", slots, h, dtype);
  std::string out = LayerTypes(preset, dtype, "").hidden;
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
                                              llvm::StringRef quantization,
                                              int64_t blockM, bool second) {
  int64_t h = preset.hiddenSize, i = preset.intermediate;
  int64_t slots = preset.topK + preset.numSharedExperts;
  LayerTypes types(preset, dtype, quantization);
  // fp8: quantized rows in, with their scales; the output in `dtype`.
  llvm::StringRef input =
      quantization.empty() || types.mxfp4 ? dtype : "f8E4M3FN";
  std::string routing = "tensor<?xi32>, tensor<?xi32>, tensor<i32>";
  std::string routingAttrs = llvm::formatv(
      "block_m = {0} : i64, num_slots = {1} : i64", blockM, slots);
  std::string rows = llvm::formatv("tensor<?x{0}x{1}>", i, input);
  std::string sorted = llvm::formatv("tensor<?x{0}x{1}>", i, dtype);
  if (!second) {
    std::string x = llvm::formatv("tensor<?x{0}x{1}>", h, input);
    ScalesText scales = types.gemmScales("x", h, types.w13Scales);
    ScalesText bias = types.gemmBias("w13_bias", types.w13Bias);
    return llvm::formatv(
        "func.func @gemm1(%x: {0}, %w13: {1}, %sorted: tensor<?xi32>, "
        "%experts: tensor<?xi32>, %count: tensor<i32>{8}{5}) -> {2} {{\n"
        "  %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count{9}{6} "
        "input(token) output(sorted) activation({11}) {{{3}} : ({0}, "
        "{1}, {4}{10}{7}) -> {2}\n  return %h : {2}\n}\n",
        x, types.w13, sorted, types.attributes(routingAttrs), routing,
        scales.args, scales.use, scales.types, bias.args, bias.use, bias.types,
        types.activation);
  }
  std::string w = llvm::formatv("tensor<?x{0}xf32>", slots);
  std::string y = llvm::formatv("tensor<?x{0}x{1}x{2}>", slots, h, dtype);
  ScalesText scales = types.gemmScales("h", i, types.w2Scales);
  ScalesText bias = types.gemmBias("w2_bias", types.w2Bias);
  std::string attrs = routingAttrs;
  if (!types.attribute.empty())
    attrs += ", " + types.attribute;
  return llvm::formatv(
      "func.func @gemm2(%h: {0}, %w2: {1}, %sorted: tensor<?xi32>, "
      "%experts: tensor<?xi32>, %count: tensor<i32>, %weights: {2}{9}{6}) -> "
      "{3} {{\n  %y = moe.grouped_matmul %h, %w2, %sorted, %experts, %count "
      "routed_weights(%weights){10}{7} input(sorted) output(slot) {{{4}} : "
      "({0}, {1}, {5}, {2}{11}{8}) -> {3}\n  return %y : {3}\n}\n",
      rows, types.w2, w, y, attrs, routing, scales.args, scales.use,
      scales.types, bias.args, bias.use, bias.types);
}

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// An error unless `quantization` is empty, a #moe.quantization weight
/// scaling, or tensor or channel with kStaticSuffix (the scalings that
/// static_tensor activations pair with).
static llvm::Error checkQuantization(llvm::StringRef quantization) {
  if (quantization.empty())
    return llvm::Error::success();
  Scheme scheme(quantization);
  if (!symbolizeWeightScaling(scheme.weights))
    return makeError("unknown --quantization '" + quantization +
                     "' (tensor, channel, block, tensor-static, "
                     "channel-static, mxfp4)");
  if (scheme.staticActivations && scheme.weights != "tensor" &&
      scheme.weights != "channel")
    return makeError("--quantization '" + quantization +
                     "': static activation scales pair with tensor or "
                     "channel weight scales (tensor-static, channel-static); "
                     "block weights scale their activations per token and "
                     "128 columns, and mxfp4 leaves them unquantized");
  return llvm::Error::success();
}

namespace {
/// The source of `part` of the expert-parallel `layer` (`preset`, its
/// description's): "layer" only, its sizes checked.
llvm::Expected<std::string>
getExpertParallelPartSource(const LayerDescription &layer, const Preset &preset,
                            llvm::StringRef part) {
  if (part != "layer")
    return makeError("an expert-parallel layer has the part 'layer' only "
                     "(moe-expert-parallel splits it into its phases), not '" +
                     part + "'");
  for (auto [name, value, least] :
       {std::tuple<llvm::StringRef, int64_t, int64_t>{"world size", layer.world,
                                                      1},
        {"rank", layer.rank, 0},
        {"token count", layer.tokens, 1}})
    if (std::optional<std::string> bad = checkSizeOption(name, value, least))
      return makeError(*bad);
  if (layer.rank >= layer.world || layer.numExperts % layer.world)
    return makeError(llvm::formatv("rank {0} of {1} ranks: the rank must be "
                                   "below the world size, which must divide "
                                   "the {2} routed experts",
                                   layer.rank, layer.world, layer.numExperts)
                         .str());
  return getExpertParallelLayerSource(preset, layer.dtype, layer.quantization,
                                      {layer.world, layer.rank, layer.tokens});
}
} // namespace

llvm::Expected<std::string>
mlir::moe::getPartSource(const LayerDescription &layer, llvm::StringRef part,
                         int64_t blockM) {
  llvm::StringRef dtype = layer.dtype;
  if (dtype != "bf16" && dtype != "f16" && dtype != "f32")
    return makeError("unknown --dtype '" + dtype + "' (bf16, f16, f32)");
  bool routed = part == "layer" || part == "routing" || part == "router";
  if (!routed && part != "experts" && part != "gemm1" && part != "gemm2")
    return makeError("unknown --part '" + part +
                     "' (layer, experts, routing, router, gemm1, gemm2)");
  if (routed && layer.router.empty())
    return makeError("--part '" + part +
                     "' needs a router, which layer sizes do not give (their "
                     "parts: experts, gemm1, gemm2)");
  llvm::StringRef quantization = layer.quantization;
  if (llvm::Error error = checkQuantization(quantization))
    return std::move(error);
  // The sources multiply sizes (2I, E+X): bound them first.
  for (auto [name, value, least] :
       {std::tuple<llvm::StringRef, int64_t, int64_t>{"hidden size",
                                                      layer.hiddenSize, 1},
        {"intermediate size", layer.intermediate, 1},
        {"expert count", layer.numExperts, 1},
        {"top_k", layer.topK, 1},
        {"shared expert count", layer.numSharedExperts, 0}})
    if (std::optional<std::string> bad = checkSizeOption(name, value, least))
      return makeError(*bad);
  Preset preset = layer.preset();
  if (layer.world)
    return getExpertParallelPartSource(layer, preset, part);
  if (part == "layer")
    return getLayerSource(preset, dtype, quantization);
  if (part == "experts")
    return getExpertsSource(preset, dtype, quantization);
  if (part == "routing")
    return getRoutingSource(preset, dtype, blockM);
  if (part == "router")
    return getRouterSource(preset);
  return getGroupedMatmulSource(preset, dtype, quantization, blockM,
                                part == "gemm2");
}

llvm::Expected<LayerDescription>
mlir::moe::parseLayerSizes(llvm::StringRef text) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("--layer-sizes: " + why +
                     " (expected experts=E,hidden=H,intermediate=I,top_k=K"
                     "[,shared=X], got '" +
                     text + "')");
  };
  LayerDescription layer{};
  llvm::StringMap<int64_t *> fields{{"experts", &layer.numExperts},
                                    {"hidden", &layer.hiddenSize},
                                    {"intermediate", &layer.intermediate},
                                    {"top_k", &layer.topK},
                                    {"shared", &layer.numSharedExperts}};
  llvm::StringMap<bool> given;
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ',');
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    key = key.trim();
    int64_t *field = fields.lookup(key);
    if (!field)
      return bad("unknown size '" + key + "'");
    if (!given.insert({key, true}).second)
      return bad("'" + key + "' given twice");
    if (value.trim().getAsInteger(10, *field) ||
        *field < (key == "shared" ? 0 : 1) || *field > kMaxSize)
      return bad(
          "'" + key + "' must be " +
          (key == "shared" ? "a non-negative integer" : "a positive integer") +
          " up to " + llvm::Twine(kMaxSize));
  }
  for (llvm::StringRef key : {"experts", "hidden", "intermediate", "top_k"})
    if (!given.count(key))
      return bad("no '" + key + "'");
  if (layer.topK > layer.numExperts)
    return bad("top_k exceeds experts");
  return layer;
}

/// "bf16", "f16" or "f32" for `type`, empty for any other.
static std::string dtypeName(Type type) {
  if (type.isBF16())
    return "bf16";
  if (type.isF16())
    return "f16";
  if (type.isF32())
    return "f32";
  return "";
}

/// The parameters of a moe attribute as written: "#moe.router<PARAMS>" ->
/// "PARAMS".
static std::string attributeParameters(Attribute attribute) {
  std::string text;
  llvm::raw_string_ostream(text) << attribute;
  return llvm::StringRef(text)
      .drop_until([](char c) { return c == '<'; })
      .drop_front()
      .drop_back()
      .str();
}

llvm::Expected<LayerDescription> mlir::moe::describeLayer(ModuleOp module) {
  SmallVector<FusedMoeOp> layers;
  module.walk([&](FusedMoeOp op) { layers.push_back(op); });
  if (layers.size() != 1)
    return makeError("expected one moe.fused_moe (the layer), found " +
                     llvm::Twine(layers.size()));
  FusedMoeOp op = layers.front();
  // The verifier has checked the shapes: w13 is [E+X, 2I, H].
  auto w13 = cast<ShapedType>(op.getW13().getType());
  RouterAttr router = op.getRouter();
  LayerDescription layer{};
  layer.hiddenSize = w13.getDimSize(2);
  layer.intermediate = w13.getDimSize(1) / 2;
  layer.numExperts =
      cast<ShapedType>(op.getRouterLogits().getType()).getDimSize(1);
  layer.topK = router.getTopK();
  layer.numSharedExperts = router.getNumSharedExperts();
  layer.router = attributeParameters(router);
  layer.bias = op.getCorrectionBias() != nullptr;
  // Parts made from the description have SiLU-and-mul or the layer's
  // clamped SwiGLU, and expert biases in the layer's dtype.
  if (SwigluAttr swiglu = op.getSwigluAttr())
    layer.swiglu = attributeParameters(swiglu);
  layer.expertBiases = op.getW13Bias() != nullptr;
  layer.dtype = dtypeName(
      cast<ShapedType>(op.getHiddenStates().getType()).getElementType());
  if (layer.dtype.empty())
    return makeError("the layer's element type is not bf16, f16 or f32");
  // A description's activation scaling follows from its weights' (the
  // verifier has paired them), static scales from kStaticSuffix.
  if (QuantizationAttr quantization = op.getQuantizationAttr()) {
    if (quantization.getWeights() == WeightScaling::block &&
        quantization.getBlockSize() != kScaleBlock)
      return makeError("the layer's fp8 scale blocks are " +
                       llvm::Twine(quantization.getBlockSize()) +
                       " wide; a layer description has " +
                       llvm::Twine(kScaleBlock));
    layer.quantization = stringifyWeightScaling(quantization.getWeights());
    if (quantization.hasStaticActivations())
      layer.quantization += kStaticSuffix;
  }
  return layer;
}

std::string LayerSource::label() const {
  std::string reduced = shrink > 1 ? " (reduced)" : "";
  if (!presetName.empty())
    return presetName + reduced;
  if (!layerSizes.empty())
    return "sizes " + layerSizes + reduced;
  return inputFile;
}

/// The layer of a preset or of sizes, shrunk and with its dtype; none for a
/// file; an error unless exactly one of the three is given.
static llvm::Expected<std::optional<LayerDescription>>
describeNamedLayer(const LayerSource &source) {
  SmallVector<std::string> given;
  if (!source.inputFile.empty())
    given.push_back("the file '" + source.inputFile + "'");
  if (!source.presetName.empty())
    given.push_back("--preset '" + source.presetName + "'");
  if (!source.layerSizes.empty())
    given.push_back("--layer-sizes '" + source.layerSizes + "'");
  if (given.empty())
    return makeError("give either a layer file or --preset (see --help)");
  if (given.size() > 1)
    return makeError("give one layer, not " + llvm::join(given, " and "));
  if (!source.quantization.empty()) {
    if (!source.inputFile.empty())
      return makeError("--quantization is for a preset or layer sizes; the "
                       "file's layer has its own");
    if (!llvm::is_contained({"layer", "experts", "gemm1", "gemm2"},
                            source.part))
      return makeError("--quantization is for --part layer, experts, gemm1 "
                       "or gemm2, not '" +
                       source.part + "'");
    if (llvm::Error error = checkQuantization(source.quantization))
      return std::move(error);
  }
  if (source.world && !source.inputFile.empty())
    return makeError("--expert-parallel is for a preset or layer sizes; the "
                     "file's layer says its own");
  if (!source.inputFile.empty())
    return std::nullopt;
  LayerDescription layer;
  if (!source.presetName.empty()) {
    const Preset *preset = findPreset(source.presetName);
    if (!preset)
      return makeError("unknown preset '" + source.presetName + "' (" +
                       presetNames() + ")");
    layer = LayerDescription::of(*preset, source.dtype);
  } else {
    llvm::Expected<LayerDescription> sized = parseLayerSizes(source.layerSizes);
    if (!sized)
      return sized.takeError();
    layer = std::move(*sized);
    layer.dtype = source.dtype;
  }
  layer.quantization = source.quantization;
  layer.world = source.world;
  layer.rank = source.rank;
  layer.tokens = source.tokens;
  // --reduced: routing unchanged.
  layer.hiddenSize /= source.shrink;
  layer.intermediate /= source.shrink;
  return layer;
}

OwningOpRef<ModuleOp> mlir::moe::parseLayerSource(const LayerSource &source,
                                                  MLIRContext &context,
                                                  llvm::SourceMgr &sourceMgr,
                                                  std::string &error) {
  llvm::Expected<std::optional<LayerDescription>> named =
      describeNamedLayer(source);
  if (!named) {
    error = llvm::toString(named.takeError());
    return nullptr;
  }
  OwningOpRef<ModuleOp> module;
  if (*named) {
    auto text = getPartSource(**named, source.part, source.blockM);
    if (!text) {
      error = llvm::toString(text.takeError());
      return nullptr;
    }
    module = parseSourceString<ModuleOp>(*text, &context);
  } else {
    auto file = readSourceFile(source.inputFile);
    if (!file) {
      error = llvm::toString(file.takeError());
      return nullptr;
    }
    sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  }
  if (!module) {
    error = "could not parse or verify " + source.label();
    return nullptr;
  }
  if (*named || source.part == "layer")
    return module;
  // A part of a file's layer: made from the layer's description.
  llvm::Expected<LayerDescription> layer = describeLayer(*module);
  llvm::Expected<std::string> text =
      layer ? getPartSource(*layer, source.part, source.blockM)
            : layer.takeError();
  if (!text) {
    error = source.label() + ": " + llvm::toString(text.takeError());
    return nullptr;
  }
  return parseSourceString<ModuleOp>(*text, &context);
}

llvm::Expected<LayerDescription>
mlir::moe::describeLayerSource(const LayerSource &source, MLIRContext &context,
                               llvm::SourceMgr &sourceMgr) {
  llvm::Expected<std::optional<LayerDescription>> named =
      describeNamedLayer(source);
  if (!named)
    return named.takeError();
  if (*named)
    return std::move(**named);
  LayerSource whole = source;
  whole.part = "layer";
  std::string error;
  OwningOpRef<ModuleOp> module =
      parseLayerSource(whole, context, sourceMgr, error);
  if (!module)
    return makeError(error);
  llvm::Expected<LayerDescription> layer = describeLayer(*module);
  if (!layer)
    return makeError(source.label() + ": " + toString(layer.takeError()));
  return layer;
}
