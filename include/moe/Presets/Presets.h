//===- Presets.h - The MoE layers of well-known models ----------*- C++ -*-===//

#ifndef MOE_PRESETS_PRESETS_H
#define MOE_PRESETS_PRESETS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace mlir {
namespace moe {

/// A model's MoE layer: sizes and routing rules as the model ships them.
struct Preset {
  const char *name;
  int64_t hiddenSize, intermediate, numExperts, topK, numSharedExperts;
  const char *router; // the #moe.router parameters (agreeing with the above)
  bool bias;

  /// Hidden and intermediate sizes divided by `shrink` (routing unchanged).
  Preset shrunk(int64_t shrink) const;
};

/// mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, kimi-k2.
llvm::ArrayRef<Preset> getPresets();
/// The preset called `name`, or null.
const Preset *findPreset(llvm::StringRef name);
/// "mixtral-8x7b, qwen3-30b-a3b, ..." for messages.
std::string presetNames();

/// The layer as a function of a moe.fused_moe: (hidden [T,H], logits [T,E],
/// w13, w2[, bias]) -> [T,H], element type `dtype`.
std::string getLayerSource(const Preset &preset, llvm::StringRef dtype);

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
/// expert ids, padded count) -> SiLU-and-mul rows [C,I] in sorted order; the
/// second as (rows [C,I], w2, sorted ids, expert ids, padded count, routed
/// weights [T,S]) -> [T,S,H] in slot order.
std::string getGroupedMatmulSource(const Preset &preset, llvm::StringRef dtype,
                                   int64_t blockM, bool second);

/// The source of `part` ("layer", "routing", "router", "gemm1" or "gemm2") of
/// preset `name` with its hidden and intermediate sizes divided by `shrink`,
/// element type `dtype` (bf16, f16, f32) and routing blocks of `blockM` rows;
/// an error names the valid choices.
llvm::Expected<std::string>
getPresetSource(llvm::StringRef name, llvm::StringRef part, int64_t shrink,
                llvm::StringRef dtype, int64_t blockM);

/// What a tool parses: `part` of the preset `presetName` (see
/// getPresetSource) when that is not empty, else the file `inputFile`.
struct LayerSource {
  std::string inputFile, presetName, part = "layer", dtype = "bf16";
  int64_t shrink = 1, blockM = 64;

  /// "deepseek-v3 (reduced)" or the file name, for messages.
  std::string label() const;
};

/// Parses and verifies `source` in `context`, reporting a file's diagnostics
/// through `sourceMgr`; null with `error` set when that fails.
OwningOpRef<ModuleOp> parseLayerSource(const LayerSource &source,
                                       MLIRContext &context,
                                       llvm::SourceMgr &sourceMgr,
                                       std::string &error);

} // namespace moe
} // namespace mlir

#endif // MOE_PRESETS_PRESETS_H
