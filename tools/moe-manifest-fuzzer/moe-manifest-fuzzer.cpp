//===- moe-manifest-fuzzer.cpp - Fuzz the bundle manifest parser ----------===//
//
// libFuzzer target: an input is a manifest.txt (docs/BUNDLE.md). It is
// parsed as the runtime parses it; a manifest that parses is then evaluated
// as a load and a run would without a GPU: the workspace allocations at
// tokens-max, and at T = 1, each variant's bound and tokens-max the variant
// chosen, every tensor's dims and size, every expression of every tensor
// map and launch, and the checks of a run's tensors. A returned error is no
// finding; a crash, a sanitizer report or a hang is. Without MOE_FUZZ this
// program runs the files named on its command line (FuzzerReplay.cpp).
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"

#include <cstdint>
#include <string>

using namespace moe::runtime;

namespace {

/// Evaluates `expressions` at `tokens`; errors are expected.
void evaluateAll(const std::vector<Expression> &expressions, int64_t tokens) {
  for (const Expression &expression : expressions) {
    int64_t value = 0;
    (void)expression.evaluate(tokens, value);
  }
}

/// What a run at `tokens` evaluates, without a device.
void evaluateRun(const Manifest &manifest, int64_t tokens) {
  int index = 0;
  if (!selectVariant(manifest, tokens, index).ok())
    return;
  std::vector<MoeTensor> tensors;
  // One aligned, never dereferenced address for every tensor.
  alignas(16) static char storage[16];
  for (const BufferDecl &tensor : manifest.tensors) {
    int64_t bytes = 0;
    (void)bufferBytes(tensor, tokens, bytes);
    MoeTensor argument = {};
    argument.data = storage;
    argument.dtype = tensor.dtype;
    argument.rank = static_cast<int32_t>(tensor.dims.size());
    if (!evaluateDims(tensor, tokens, argument.dims).ok())
      return;
    tensors.push_back(argument);
  }
  (void)checkRunArguments(manifest, tokens, tensors.data(),
                          static_cast<int>(tensors.size()));

  const Variant &variant = manifest.variants[index];
  for (const BufferDecl &workspace : variant.workspaces) {
    int64_t bytes = 0;
    (void)bufferBytes(workspace, tokens, bytes);
  }
  for (const TensorMapDecl &map : variant.tensorMaps) {
    evaluateAll(map.dims, tokens);
    evaluateAll(map.strides, tokens);
    evaluateAll(map.box, tokens);
  }
  for (const LaunchDecl &launch : variant.launches) {
    evaluateAll({launch.grid.begin(), launch.grid.end()}, tokens);
    evaluateAll({launch.block.begin(), launch.block.end()}, tokens);
    evaluateAll({launch.cluster.begin(), launch.cluster.end()}, tokens);
    evaluateAll({launch.smem}, tokens);
    for (const LaunchArg &arg : launch.args)
      if (arg.kind == LaunchArg::Kind::I32 || arg.kind == LaunchArg::Kind::I64)
        evaluateAll({arg.scalar}, tokens);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Manifest manifest;
  if (!parseManifest(std::string(reinterpret_cast<const char *>(data), size),
                     "manifest.txt", manifest)
           .ok())
    return 0;
  std::vector<int64_t> allocations;
  (void)workspaceAllocationBytes(manifest, allocations);
  evaluateRun(manifest, 1);
  for (const Variant &variant : manifest.variants)
    evaluateRun(manifest, variant.maxTokens);
  evaluateRun(manifest, manifest.tokensMax);
  return 0;
}
