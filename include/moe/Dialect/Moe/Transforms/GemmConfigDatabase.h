//===- GemmConfigDatabase.h - Tuned grouped-matmul configs ------*- C++ -*-===//
//
// The database moe-tune writes and moe-tile reads: for a grouped matmul shape
// (stored experts E, output rows N and reduction K of the weights, element
// type and fp8 scaling, CUDA device name) and a token bucket, the
// #moe.gemm_config fields that measured fastest. The format is
// docs/CONFIG-DATABASE.md; the entries shipped with moe-mlir
// (configs/gemm-configs.json) are compiled in.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_GEMMCONFIGDATABASE_H
#define MOE_DIALECT_MOE_TRANSFORMS_GEMMCONFIGDATABASE_H

#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace mlir {
namespace moe {

/// Fields of a #moe.gemm_config to change; unset ones keep the base's.
struct GemmConfigChanges {
  std::optional<int64_t> blockN, blockK, numStages, numWarpgroups, splitK,
      clusterM, clusterN;
  std::optional<bool> persistent, warpSpecialized, streamK;
};

/// `base` with `changes` applied, verified; null (after reporting through
/// `emitError`) when the result is not a valid #moe.gemm_config.
GemmConfigAttr applyChanges(GemmConfigAttr base,
                            const GemmConfigChanges &changes,
                            function_ref<InFlightDiagnostic()> emitError);

/// What a tuned configuration is for.
struct GemmShapeKey {
  int64_t experts;
  int64_t n;
  int64_t k;
  /// "bf16", "f16", "f32" or "f8E4M3FN".
  std::string dtype;
  /// How f8E4M3FN weights are scaled ("tensor", "channel", "block": the
  /// #moe.quantization's weights); empty for other types. Block scales
  /// allow fewer configs (block_k the scale block, block_n <= 128), so the
  /// schemes have entries of their own.
  std::string quantization;
  /// The CUDA device name, e.g. "NVIDIA H100 80GB HBM3".
  std::string device;
  /// Rows per routing block the entry was tuned with; 0: any.
  int64_t blockM = 0;

  /// The key of `op` (E, N, K, element type and quantization of its
  /// weights, its routing block_m) on `device`.
  static GemmShapeKey of(GroupedMatmulOp op, llvm::StringRef device);
  /// "E=8 N=28672 K=4096 bf16 block_m=64 on 'NVIDIA H100 80GB HBM3'", with
  /// " quantization=block" after an fp8 dtype.
  std::string str() const;
  bool operator<(const GemmShapeKey &other) const {
    return std::tie(experts, n, k, dtype, quantization, device, blockM) <
           std::tie(other.experts, other.n, other.k, other.dtype,
                    other.quantization, other.device, other.blockM);
  }
};

/// One tuned entry: the token bucket it was measured at and its fields, or
/// that moe-tile's heuristic measured fastest there (`"config":
/// "heuristic"`), which keeps that bucket from taking a neighbour's entry.
struct TunedGemmConfig {
  int64_t tokens;
  GemmConfigChanges changes;
  bool heuristic = false;
};

class GemmConfigDatabase {
public:
  /// Parses a database in JSON; `origin` names it in errors.
  static llvm::Expected<GemmConfigDatabase> parse(llvm::StringRef json,
                                                  llvm::StringRef origin);
  /// Reads and parses the database file at `path`.
  static llvm::Expected<GemmConfigDatabase> load(llvm::StringRef path);
  /// The entries shipped with moe-mlir (configs/gemm-configs.json).
  static const GemmConfigDatabase &shipped();

  /// The entry of `key` whose token bucket is nearest `tokens` by ratio (the
  /// smaller bucket on a tie), among the entries tuned with the key's
  /// block_m or else among those for any block_m; null when there is none.
  const TunedGemmConfig *lookup(const GemmShapeKey &key, int64_t tokens) const;

private:
  std::map<GemmShapeKey, std::vector<TunedGemmConfig>> entries;
};

} // namespace moe
} // namespace mlir

#endif // MOE_DIALECT_MOE_TRANSFORMS_GEMMCONFIGDATABASE_H
