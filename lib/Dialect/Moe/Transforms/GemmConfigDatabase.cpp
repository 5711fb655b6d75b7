//===- GemmConfigDatabase.cpp - Tuned grouped-matmul configs --------------===//

#include "moe/Dialect/Moe/Transforms/GemmConfigDatabase.h"
#include "moe/Support/SourceLimits.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

GemmConfigAttr
mlir::moe::applyChanges(GemmConfigAttr base, const GemmConfigChanges &changes,
                        function_ref<InFlightDiagnostic()> emitError) {
  return GemmConfigAttr::getChecked(
      emitError, base.getContext(), base.getBlockM(),
      changes.blockN.value_or(base.getBlockN()),
      changes.blockK.value_or(base.getBlockK()),
      changes.numStages.value_or(base.getNumStages()),
      changes.numWarpgroups.value_or(base.getNumWarpgroups()),
      changes.splitK.value_or(base.getSplitK()), base.getTmaA(), base.getTmaB(),
      changes.clusterM.value_or(base.getClusterM()),
      changes.clusterN.value_or(base.getClusterN()),
      changes.persistent.value_or(base.getPersistent()),
      changes.warpSpecialized.value_or(base.getWarpSpecialized()),
      changes.streamK.value_or(base.getStreamK()));
}

GemmShapeKey GemmShapeKey::of(GroupedMatmulOp op, llvm::StringRef device) {
  ShapedType weights = op.getWeightsType();
  std::string dtype;
  llvm::raw_string_ostream(dtype) << weights.getElementType();
  QuantizationAttr quantization = op.getQuantizationAttr();
  return {weights.getDimSize(0),
          weights.getDimSize(1),
          weights.getDimSize(2),
          dtype,
          quantization ? stringifyWeightScaling(quantization.getWeights()).str()
                       : "",
          device.str(),
          static_cast<int64_t>(op.getBlockM())};
}

std::string GemmShapeKey::str() const {
  std::string scaling =
      quantization.empty() ? "" : " quantization=" + quantization;
  std::string routing =
      blockM ? llvm::formatv(" block_m={0}", blockM).str() : "";
  return llvm::formatv("E={0} N={1} K={2} {3}{4}{5} on '{6}'", experts, n, k,
                       dtype, scaling, routing, device);
}

namespace {
/// Reads one database; errors name the origin and the entry.
class Parser {
public:
  explicit Parser(llvm::StringRef origin) : origin(origin) {}

  llvm::Error fail(const llvm::Twine &message) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   origin + ": " + message);
  }

  /// Every key of `object` must be in `known`: a misspelt field must not
  /// make an entry silently mean something else.
  llvm::Error checkKeys(const json::Object &object,
                        llvm::ArrayRef<llvm::StringRef> known,
                        const llvm::Twine &where) const {
    for (const auto &field : object)
      if (!llvm::is_contained(known, field.first.str()))
        return fail(where + ": unknown field '" + field.first.str() + "'");
    return llvm::Error::success();
  }

  llvm::Expected<int64_t> positive(const json::Object &object,
                                   llvm::StringRef name,
                                   const llvm::Twine &where) const {
    std::optional<int64_t> value = object.getInteger(name);
    if (!value || *value < 1)
      return fail(where + ": '" + name + "' must be a positive integer");
    return *value;
  }

  llvm::Error readChanges(const json::Object &config, GemmConfigChanges &out,
                          const llvm::Twine &where) const {
    static constexpr llvm::StringRef integerFields[] = {
        "block_n", "block_k",   "num_stages", "num_warpgroups",
        "split_k", "cluster_m", "cluster_n"};
    std::optional<int64_t> *targets[] = {
        &out.blockN, &out.blockK,   &out.numStages, &out.numWarpgroups,
        &out.splitK, &out.clusterM, &out.clusterN};
    llvm::SmallVector<llvm::StringRef> known(std::begin(integerFields),
                                             std::end(integerFields));
    known.append({"persistent", "warp_specialized", "stream_k"});
    if (llvm::Error error = checkKeys(config, known, where + ": config"))
      return error;
    for (auto [name, target] : llvm::zip_equal(integerFields, targets)) {
      if (!config.get(name))
        continue;
      std::optional<int64_t> value = config.getInteger(name);
      if (!value)
        return fail(where + ": config '" + name + "' must be an integer");
      *target = *value;
    }
    for (auto [name, target] : {std::pair{"persistent", &out.persistent},
                                {"warp_specialized", &out.warpSpecialized},
                                {"stream_k", &out.streamK}}) {
      if (!config.get(name))
        continue;
      std::optional<bool> value = config.getBoolean(name);
      if (!value)
        return fail(where + ": config '" + name + "' must be a boolean");
      *target = *value;
    }
    return llvm::Error::success();
  }

  /// An fp8 entry's weight scaling: required, since the schemes' kernels
  /// take different configs; other types have none.
  llvm::Error readQuantization(const json::Object &entry, GemmShapeKey &key,
                               const llvm::Twine &where) const {
    bool fp8 = key.dtype == "f8E4M3FN";
    if (!entry.get("quantization")) {
      if (fp8)
        return fail(where + ": an f8E4M3FN entry needs 'quantization' "
                            "(\"tensor\", \"channel\" or \"block\")");
      return llvm::Error::success();
    }
    if (!fp8)
      return fail(where + ": 'quantization' is for f8E4M3FN entries, not " +
                  key.dtype);
    std::optional<llvm::StringRef> scaling = entry.getString("quantization");
    if (!scaling || !symbolizeWeightScaling(*scaling))
      return fail(where + ": 'quantization' must be \"tensor\", \"channel\" "
                          "or \"block\"");
    key.quantization = scaling->str();
    return llvm::Error::success();
  }

  llvm::Error readEntry(const json::Value &value, size_t index,
                        GemmShapeKey &key, TunedGemmConfig &tuned) const {
    std::string where = llvm::formatv("entry {0}", index);
    const json::Object *entry = value.getAsObject();
    if (!entry)
      return fail(where + ": not an object");
    if (llvm::Error error =
            checkKeys(*entry,
                      {"device", "dtype", "quantization", "E", "N", "K",
                       "block_m", "tokens", "config", "measured"},
                      where))
      return error;
    std::optional<llvm::StringRef> device = entry->getString("device");
    std::optional<llvm::StringRef> dtype = entry->getString("dtype");
    if (!device || device->empty())
      return fail(where + ": 'device' must be a non-empty string");
    if (!dtype ||
        !llvm::is_contained({"bf16", "f16", "f32", "f8E4M3FN"}, *dtype))
      return fail(where + ": 'dtype' must be \"bf16\", \"f16\", \"f32\" or "
                          "\"f8E4M3FN\"");
    key.device = device->str();
    key.dtype = dtype->str();
    if (llvm::Error error = readQuantization(*entry, key, where))
      return error;
    for (auto [name, target] : {std::pair{"E", &key.experts},
                                {"N", &key.n},
                                {"K", &key.k},
                                {"tokens", &tuned.tokens}}) {
      llvm::Expected<int64_t> number = positive(*entry, name, where);
      if (!number)
        return number.takeError();
      *target = *number;
    }
    if (entry->get("block_m")) {
      llvm::Expected<int64_t> blockM = positive(*entry, "block_m", where);
      if (!blockM)
        return blockM.takeError();
      key.blockM = *blockM;
    }
    if (entry->getString("config") == llvm::StringRef("heuristic")) {
      tuned.heuristic = true;
      return llvm::Error::success();
    }
    const json::Object *config = entry->getObject("config");
    if (!config)
      return fail(where + ": 'config' must be an object or \"heuristic\"");
    return readChanges(*config, tuned.changes, where);
  }

private:
  llvm::StringRef origin;
};
} // namespace

llvm::Expected<GemmConfigDatabase>
GemmConfigDatabase::parse(llvm::StringRef text, llvm::StringRef origin) {
  Parser parser(origin);
  llvm::Expected<json::Value> document = json::parse(text);
  if (!document)
    return parser.fail("invalid JSON: " + toString(document.takeError()));
  const json::Object *root = document->getAsObject();
  if (!root)
    return parser.fail("the database must be a JSON object");
  if (llvm::Error error =
          parser.checkKeys(*root, {"comment", "entries"}, "database"))
    return std::move(error);
  const json::Array *list = root->getArray("entries");
  if (!list)
    return parser.fail("'entries' must be an array");
  GemmConfigDatabase database;
  for (auto [index, value] : llvm::enumerate(*list)) {
    GemmShapeKey key;
    TunedGemmConfig tuned;
    if (llvm::Error error = parser.readEntry(value, index, key, tuned))
      return std::move(error);
    std::vector<TunedGemmConfig> &buckets = database.entries[key];
    if (llvm::any_of(buckets, [&](const TunedGemmConfig &other) {
          return other.tokens == tuned.tokens;
        }))
      return parser.fail(llvm::formatv("entry {0}: a second entry for {1} at "
                                       "{2} tokens",
                                       index, key.str(), tuned.tokens)
                             .str());
    buckets.push_back(tuned);
  }
  return database;
}

llvm::Expected<GemmConfigDatabase>
GemmConfigDatabase::load(llvm::StringRef path) {
  // Bounded as the tools' sources are: llvm::json's parser recurses once per
  // nested array or object.
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> file =
      readSourceFile(path);
  if (!file)
    return llvm::createStringError("cannot read config database '" + path +
                                   "': " + toString(file.takeError()));
  return parse((*file)->getBuffer(), path);
}

const GemmConfigDatabase &GemmConfigDatabase::shipped() {
  static const GemmConfigDatabase database = [] {
    static constexpr char text[] = {
#include "ShippedGemmConfigs.inc"
    };
    llvm::Expected<GemmConfigDatabase> parsed =
        parse(llvm::StringRef(text, sizeof(text)), "shipped gemm configs");
    // The build checks the shipped file (check-moe parses it through
    // moe-opt), so a failure here is a broken build, not bad user input.
    if (!parsed)
      llvm::report_fatal_error(parsed.takeError());
    return std::move(*parsed);
  }();
  return database;
}

const TunedGemmConfig *GemmConfigDatabase::lookup(const GemmShapeKey &key,
                                                  int64_t tokens) const {
  auto found = entries.find(key);
  if (found == entries.end() && key.blockM != 0) {
    GemmShapeKey anyBlockM = key;
    anyBlockM.blockM = 0;
    found = entries.find(anyBlockM);
  }
  if (found == entries.end())
    return nullptr;
  const TunedGemmConfig *best = nullptr;
  double bestDistance = 0;
  for (const TunedGemmConfig &tuned : found->second) {
    double distance = std::abs(std::log2(static_cast<double>(tuned.tokens) /
                                         static_cast<double>(tokens)));
    if (!best || distance < bestDistance ||
        (distance == bestDistance && tuned.tokens < best->tokens)) {
      best = &tuned;
      bestDistance = distance;
    }
  }
  return best;
}
