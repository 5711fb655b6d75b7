//===- Presets.h - The MoE layers of well-known models ----------*- C++ -*-===//

#ifndef MOE_PRESETS_PRESETS_H
#define MOE_PRESETS_PRESETS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace mlir {
namespace moe {

/// A model's MoE layer: sizes and routing rules as the model ships them.
struct Preset {
  const char *name;
  int64_t hiddenSize, intermediate, numExperts, topK, numSharedExperts;
  const char *router; // the #moe.router parameters (agreeing with the above)
  bool bias;          // the router's correction bias
  /// The #moe.swiglu parameters of a clamped SwiGLU (gpt-oss), or null for
  /// SiLU-and-mul.
  const char *swiglu;
  /// Whether the experts have biases (moe.fused_moe's `biases`).
  bool expertBiases;
};

/// A layer's sizes and routing as the source generators and moe-compile
/// --describe take them, owning the strings a Preset only points to: a
/// preset's, the moe.fused_moe of a file, or --layer-sizes' (which name no
/// router).
struct LayerDescription {
  std::string name; // a preset's; empty for a file or sizes
  int64_t hiddenSize, intermediate, numExperts, topK, numSharedExperts;
  std::string router; // #moe.router parameters; empty when there is none
  bool bias = false;
  std::string dtype = "bf16"; // of the activations, and of unquantized weights
  /// Empty for weights in `dtype`; else f8E4M3FN weights with fp32 scales
  /// per "tensor", "channel" or "block" (128 x 128), the activations scaled
  /// per token (tensor, channel) or per token and 128 columns (block):
  /// #moe.quantization's `weights`, paired as checkpoints pair them;
  /// "tensor-static" and "channel-static" for those weights with static
  /// per-tensor activation scales (static_tensor: checkpoints'
  /// w13_input_scale and w2_input_scale); or "mxfp4" (i8 pairs of e2m1
  /// codes with e8m0 scales, the activations unquantized).
  std::string quantization;
  /// #moe.swiglu parameters of a clamped SwiGLU; empty for SiLU-and-mul.
  std::string swiglu;
  /// Expert biases, in `dtype` as gpt-oss's checkpoints hold them.
  bool expertBiases = false;
  /// Rank `rank` of `world` ranks that split the routed experts (an
  /// expert-parallel layer, #moe.expert_parallel), at a static `tokens` a
  /// rank; world 0 is the whole layer at a dynamic T.
  int64_t world = 0, rank = 0, tokens = 0;

  /// The description of `preset` with element type `dtype`.
  static LayerDescription of(const Preset &preset, llvm::StringRef dtype);
  /// A Preset that points into this description (valid while it lives).
  Preset preset() const;
  /// {"experts", "hidden", "intermediate", "top_k", "shared"} and the name,
  /// router, bias, quantization, swiglu and expert_biases where there are:
  /// what --list-presets prints of a preset.
  llvm::json::Object toJSON() const;
};

/// mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, kimi-k2, gpt-oss-20b,
/// gpt-oss-120b.
llvm::ArrayRef<Preset> getPresets();
/// The preset called `name`, or null.
const Preset *findPreset(llvm::StringRef name);
/// "mixtral-8x7b, qwen3-30b-a3b, ..." for messages.
std::string presetNames();

/// The layer as a function of a moe.fused_moe: (hidden [T,H], logits [T,E],
/// w13, w2[, bias][, w13 bias, w2 bias][, w13 scales, w2 scales][, w13
/// input scale, w2 input scale]) -> [T,H], the arguments in the op's
/// operand order. Element type `dtype` (the expert biases' too); with a
/// `quantization` (see LayerDescription) the weights are f8E4M3FN and their
/// fp32 scales follow, shaped as QuantizationAttr::getWeightScalesShape
/// says, and with static activation scales the two GEMM inputs' scales,
/// tensor<1xf32> each. The activation is the preset's clamped SwiGLU, or
/// SiLU-and-mul.
std::string getLayerSource(const Preset &preset, llvm::StringRef dtype,
                           llvm::StringRef quantization);

/// Rank `rank` of an expert-parallel layer over `world` ranks, at `tokens`
/// tokens a rank.
struct ExpertParallelPart {
  int64_t world, rank, tokens;
};

/// getLayerSource's layer as rank `part.rank` of `part.world` holds it: the
/// moe.fused_moe with `expert_parallel = #moe.expert_parallel<...>`, T =
/// `part.tokens`, the weights (scales, biases) of its E/world routed
/// experts and the shared ones; the logits and the bias still score all E.
std::string getExpertParallelLayerSource(const Preset &preset,
                                         llvm::StringRef dtype,
                                         llvm::StringRef quantization,
                                         ExpertParallelPart part);

/// The layer's experts without its router, as a function of one
/// moe.fused_experts: (hidden [T,H], ids [T,S] i32, weights [T,S] f32, w13,
/// w2[, w13 bias, w2 bias][, w13 scales, w2 scales][, w13 input scale, w2
/// input scale]) -> [T,H], S = top_k + shared experts, the
/// weights of all E+X experts; `dtype` and `quantization` as for
/// getLayerSource.
std::string getExpertsSource(const Preset &preset, llvm::StringRef dtype,
                             llvm::StringRef quantization);

/// The routing of the layer as a function of moe.gate, moe.route (block_m
/// rows) and moe.combine: (logits [T,E][, bias], rows [T,S,H]) ->
/// (weights, ids, sorted_ids, expert_ids, num_padded, combined [T,H]).
std::string getRoutingSource(const Preset &preset, llvm::StringRef dtype,
                             int64_t blockM);

/// The router alone, a function of one moe.gate: (logits [T,E][, bias]) ->
/// (weights [T,S], ids [T,S]).
std::string getRouterSource(const Preset &preset);

/// One grouped matmul of the layer over routing of `blockM`-row blocks: the
/// first (`second` false) as a function (hidden [T,H], w13, sorted ids,
/// expert ids, padded count[, w13 bias]) -> activated rows [C,I] in sorted
/// order; the second as (rows [C,I], w2, sorted ids, expert ids, padded
/// count, routed weights [T,S][, w2 bias]) -> [T,S,H] in slot order. With a
/// `quantization` (see
/// LayerDescription) the hidden states or rows and the weights are
/// f8E4M3FN, and the function takes, last as the op does, the fp32 scales
/// of the rows ([T, ceil(H/128)] or [C, ceil(I/128)] per token and 128
/// columns for block, [T, 1] or [C, 1] per token otherwise) and then the
/// weights' (as for getLayerSource): gemm1 (x, w13, sorted ids, expert ids,
/// count, x scales, w13 scales), gemm2 (rows, w2, sorted ids, expert ids,
/// count, routed weights, row scales, w2 scales); the result stays `dtype`.
/// Static activation scales reach a grouped matmul as per-token ones do, a
/// static layer's GEMMs differing only in their #moe.quantization.
std::string getGroupedMatmulSource(const Preset &preset, llvm::StringRef dtype,
                                   llvm::StringRef quantization, int64_t blockM,
                                   bool second);

/// The source of `part` ("layer", "experts", "routing", "router", "gemm1" or
/// "gemm2") of `layer` with element type `layer.dtype` (bf16, f16, f32),
/// its `quantization` (LayerDescription's) and routing blocks
/// of `blockM` rows; an error names the valid choices, and the parts that
/// need a router are refused for a layer without one (an fp8 layer's router
/// and routing are any layer's). An expert-parallel layer (`layer.world`)
/// has only the part "layer" (getExpertParallelLayerSource).
llvm::Expected<std::string> getPartSource(const LayerDescription &layer,
                                          llvm::StringRef part, int64_t blockM);

/// The layer of "experts=E,hidden=H,intermediate=I,top_k=K[,shared=X]"
/// (moe-compile --layer-sizes; X defaults to 0), without a router; an error
/// says what is wrong with the text.
llvm::Expected<LayerDescription> parseLayerSizes(llvm::StringRef text);

/// The layer of the one moe.fused_moe of `module`: its sizes, router, bias,
/// element type (of the hidden states) and quantization (static activation
/// scales included); an error when there is none or more than one, or when
/// it has fp8 scale blocks other than the 128 a description implies.
llvm::Expected<LayerDescription> describeLayer(ModuleOp module);

/// What a tool parses: `part` of the preset `presetName` or of the layer of
/// sizes `layerSizes` (see getPartSource), else the file `inputFile`.
struct LayerSource {
  std::string inputFile, presetName, part = "layer", dtype = "bf16";
  int64_t shrink = 1, blockM = 64;
  std::string layerSizes; // parseLayerSizes' text
  /// --quantization of a preset's or the sizes' layer, experts or grouped
  /// matmuls (LayerDescription::quantization); refused with a file, whose
  /// layer says its own, and with other parts.
  std::string quantization;
  /// Rank `rank` of `world` of the expert-parallel form of a preset's or the
  /// sizes' layer at `tokens` tokens (LayerDescription's); world 0: the
  /// whole layer.
  int64_t world = 0, rank = 0, tokens = 0;

  /// "deepseek-v3 (reduced)", "sizes experts=..." or the file name, for
  /// messages.
  std::string label() const;
};

/// Parses and verifies `source` in `context`, reporting a file's diagnostics
/// through `sourceMgr`; null with `error` set when that fails.
OwningOpRef<ModuleOp> parseLayerSource(const LayerSource &source,
                                       MLIRContext &context,
                                       llvm::SourceMgr &sourceMgr,
                                       std::string &error);

/// The layer of `source`: a preset's or the sizes' with hidden and
/// intermediate sizes divided by `source.shrink`, element type
/// `source.dtype` and `source.quantization`, or the file's (parsed, then
/// describeLayer); an error says why there is none.
llvm::Expected<LayerDescription>
describeLayerSource(const LayerSource &source, MLIRContext &context,
                    llvm::SourceMgr &sourceMgr);

} // namespace moe
} // namespace mlir

#endif // MOE_PRESETS_PRESETS_H
