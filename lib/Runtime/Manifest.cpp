//===- Manifest.cpp - The launch plan of a kernel bundle ------------------===//

#include "Manifest.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

using namespace moe::runtime;

namespace {
constexpr const char *kDtypeNames[] = {"f32", "bf16", "f16",   "i32",
                                       "i64", "u8",   "f8e4m3"};
constexpr int64_t kDtypeBytes[] = {4, 2, 2, 4, 8, 1, 1};
constexpr int kNumDtypes = sizeof(kDtypeNames) / sizeof(kDtypeNames[0]);

/// The largest rank `cuTensorMapEncodeTiled` accepts.
constexpr int kMaxTensorMapRank = 5;

/// The most ranks an exchange buffer may have: its peer table's entries.
constexpr int64_t kMaxWorld = 1 << 16;

using Tokens = std::vector<std::string>;

bool isName(const std::string &token) {
  auto isAlpha = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (token.empty() || !isAlpha(token[0]))
    return false;
  for (char c : token)
    if (!isAlpha(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

/// Parses a non-empty decimal literal that fits in int64_t.
bool parseInteger(const std::string &token, int64_t &value) {
  value = 0;
  for (char c : token)
    if (c < '0' || c > '9' || __builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, c - '0', &value))
      return false;
  return !token.empty();
}

/// Splits a line into whitespace-separated tokens, dropping a `#` comment.
Tokens tokenize(const std::string &line) {
  Tokens tokens;
  size_t end = line.find('#');
  if (end == std::string::npos)
    end = line.size();
  size_t position = 0;
  while (true) {
    position = line.find_first_not_of(" \t\r\f\v", position);
    if (position >= end)
      return tokens;
    size_t next = std::min(line.find_first_of(" \t\r\f\v", position), end);
    tokens.push_back(line.substr(position, next - position));
    position = next;
  }
}

bool isRegularFile(const std::string &path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string formatDims(const int64_t *dims, size_t rank) {
  std::string text = "[";
  for (size_t i = 0; i < rank; ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

std::string toHex(uintptr_t value) {
  char text[2 * sizeof(value) + 1];
  std::snprintf(text, sizeof(text), "%llx",
                static_cast<unsigned long long>(value));
  return text;
}

Status invalidArgument(const std::string &message) {
  return Status(MOE_ERROR_INVALID_ARGUMENT, message);
}

/// Parses manifest lines into a Manifest, resolving names as it goes. Tensor
/// names are global; workspace and tensor map names are scoped to their
/// variant and may not shadow a tensor.
class ManifestParser {
public:
  ManifestParser(const std::string &source, Manifest &manifest)
      : source(source), manifest(manifest) {}

  Status parse(const std::string &text);

private:
  enum class SymbolKind { Buffer, TensorMap };
  struct Symbol {
    SymbolKind kind;
    BufferRef buffer; ///< SymbolKind::Buffer.
    int tensorMap;    ///< SymbolKind::TensorMap.
    int line;
  };

  Status parseStatement(const Tokens &tokens);
  Status parseHeader(const Tokens &tokens);
  Status checkPlacement(const std::string &keyword) const;
  Status parseVariant(const Tokens &tokens);
  /// Starts a variant for T up to `bound` on this line, with no names.
  void openVariant(int64_t bound);
  Status checkVariantLaunches() const;
  Status checkLastVariant() const;
  Status parseTarget(const Tokens &tokens);
  Status parseBuffer(const Tokens &tokens, bool isWorkspace);
  Status parseExchange(const Tokens &tokens);
  Status parseZero(const Tokens &tokens);
  Status parseTensorMap(const Tokens &tokens);
  Status parseLaunch(const Tokens &tokens);
  Status parseLaunchArg(const std::string &token, LaunchArg &arg);

  Status error(const std::string &message) const {
    return errorAt(line, message);
  }
  Status errorAt(int atLine, const std::string &message) const {
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  source + ":" + std::to_string(atLine) + ": " + message);
  }
  Status usage(const char *syntax) const {
    return error(std::string("wrong number of operands; expected '") + syntax +
                 "'");
  }
  /// Fails if a statement that may appear once was seen on `firstLine`.
  Status once(const Tokens &tokens, int &firstLine);

  /// The variant the statement belongs to: the last one opened (the only
  /// one in version 1).
  Variant &variant() { return manifest.variants.back(); }

  /// Defines `name` globally (a tensor) or in the current variant.
  Status define(const std::string &name, const Symbol &symbol, bool global);
  /// The symbol `name` denotes in the current variant; null if none.
  const Symbol *lookup(const std::string &name) const;
  Status lookupBuffer(const std::string &name, BufferRef &buffer) const;
  /// Points `workspace` at the allocation of its name, checking that all
  /// workspaces of that name have one element type.
  Status shareAllocation(BufferDecl &workspace);
  Status parseDtype(const std::string &token, MoeDtype &dtype) const;
  Status parseExpression(const std::string &token, const std::string &what,
                         Expression &expression) const;

  /// Consumes `keyword` at tokens[next].
  Status expectKeyword(const Tokens &tokens, size_t &next,
                       const char *keyword) const;
  /// Consumes `keyword` and the `count` expressions after it.
  Status parseSection(const Tokens &tokens, size_t &next, const char *keyword,
                      Expression *expressions, size_t count) const;

  /// The first declaration of a workspace name and its allocation.
  struct Allocation {
    int index;
    MoeDtype dtype;
    int line;
  };

  const std::string &source;
  Manifest &manifest;
  int line = 0;
  int targetLine = 0, moduleLine = 0, tokensMaxLine = 0;
  std::map<std::string, Symbol> globals, variantSymbols;
  std::map<std::string, Allocation> allocations;
};

Status ManifestParser::parse(const std::string &text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    ++line;
    Tokens tokens = tokenize(text.substr(start, end - start));
    start = end + 1;
    if (tokens.empty())
      continue;
    Status status =
        manifest.version ? parseStatement(tokens) : parseHeader(tokens);
    if (!status.ok())
      return status;
  }
  auto missing = [&](const char *statement) {
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  source + ": missing '" + statement + "' statement");
  };
  if (!manifest.version)
    return missing("moe-bundle <version>");
  if (!targetLine)
    return missing("target");
  if (!moduleLine)
    return missing("module");
  if (!tokensMaxLine)
    return missing("tokens-max");
  if (manifest.version == 1) {
    variant().maxTokens = manifest.tokensMax;
    return Status();
  }
  if (manifest.variants.empty())
    return missing("variant");
  return checkLastVariant();
}

Status ManifestParser::parseHeader(const Tokens &tokens) {
  if (tokens[0] != "moe-bundle")
    return error("expected 'moe-bundle <version>' as the first statement, "
                 "got '" +
                 tokens[0] + "'");
  if (tokens.size() != 2)
    return usage("moe-bundle <version>");
  if (tokens[1] != "1" && tokens[1] != "2" && tokens[1] != "3")
    return error("unsupported bundle format version '" + tokens[1] +
                 "'; this runtime reads versions 1 to 3: recompile the bundle "
                 "with moe-compile");
  manifest.version = tokens[1][0] - '0';
  // A version 1 manifest is one variant, for every T up to tokens-max
  // (set once tokens-max is known).
  if (manifest.version == 1)
    openVariant(0);
  return Status();
}

Status ManifestParser::parseStatement(const Tokens &tokens) {
  const std::string &keyword = tokens[0];
  if (keyword == "variant")
    return parseVariant(tokens);
  if (Status status = checkPlacement(keyword); !status.ok())
    return status;
  if (keyword == "target")
    return parseTarget(tokens);
  if (keyword == "module") {
    if (tokens.size() != 2 && tokens.size() != 3)
      return usage("module <cubin> [<ptx>]");
    if (Status status = once(tokens, moduleLine); !status.ok())
      return status;
    manifest.cubin = tokens[1];
    manifest.ptx = tokens.size() == 3 ? tokens[2] : "";
    return Status();
  }
  if (keyword == "tokens-max") {
    if (tokens.size() != 2)
      return usage("tokens-max <int>");
    if (Status status = once(tokens, tokensMaxLine); !status.ok())
      return status;
    if (!parseInteger(tokens[1], manifest.tokensMax) || manifest.tokensMax < 1)
      return error("bad tokens-max '" + tokens[1] +
                   "'; expected a positive integer");
    return Status();
  }
  if (keyword == "tensor")
    return parseBuffer(tokens, /*isWorkspace=*/false);
  if (keyword == "workspace")
    return parseBuffer(tokens, /*isWorkspace=*/true);
  if (keyword == "exchange")
    return parseExchange(tokens);
  if (keyword == "zero")
    return parseZero(tokens);
  if (keyword == "tensormap")
    return parseTensorMap(tokens);
  if (keyword == "launch")
    return parseLaunch(tokens);
  if (keyword == "moe-bundle")
    return error("'moe-bundle' must be the first statement, and only once");
  return error("unknown statement '" + keyword + "'");
}

Status ManifestParser::checkPlacement(const std::string &keyword) const {
  if (manifest.version == 1)
    return Status();
  bool perVariant = keyword == "workspace" || keyword == "tensormap" ||
                    keyword == "zero" || keyword == "launch";
  bool global = keyword == "target" || keyword == "module" ||
                keyword == "tokens-max" || keyword == "tensor" ||
                keyword == "exchange";
  if (perVariant && manifest.variants.empty())
    return error("'" + keyword + "' must follow a 'variant' line");
  if (global && !manifest.variants.empty())
    return error("'" + keyword + "' must come before the first 'variant' line");
  return Status();
}

Status ManifestParser::parseVariant(const Tokens &tokens) {
  if (manifest.version == 1)
    return error("'variant' needs bundle format version 2 ('moe-bundle 2')");
  if (tokens.size() != 2)
    return usage("variant <max-tokens>");
  int64_t bound = 0;
  if (!parseInteger(tokens[1], bound) || bound < 1)
    return error("bad variant bound '" + tokens[1] +
                 "'; expected a positive integer");
  if (!manifest.variants.empty()) {
    if (Status status = checkVariantLaunches(); !status.ok())
      return status;
    const Variant &previous = variant();
    if (bound <= previous.maxTokens)
      return error(
          "variant bound " + tokens[1] + " is not above the previous one, " +
          std::to_string(previous.maxTokens) + " on line " +
          std::to_string(previous.line) + "; bounds increase strictly");
  }
  openVariant(bound);
  return Status();
}

void ManifestParser::openVariant(int64_t bound) {
  Variant opened;
  opened.maxTokens = bound;
  opened.line = line;
  manifest.variants.push_back(std::move(opened));
  variantSymbols.clear();
}

Status ManifestParser::checkVariantLaunches() const {
  const Variant &last = manifest.variants.back();
  if (last.launches.empty())
    return errorAt(last.line, "variant " + std::to_string(last.maxTokens) +
                                  " has no launch");
  return Status();
}

Status ManifestParser::checkLastVariant() const {
  if (Status status = checkVariantLaunches(); !status.ok())
    return status;
  const Variant &last = manifest.variants.back();
  if (last.maxTokens != manifest.tokensMax)
    return errorAt(last.line, "the last variant's bound, " +
                                  std::to_string(last.maxTokens) +
                                  ", is not tokens-max, " +
                                  std::to_string(manifest.tokensMax));
  return Status();
}

Status ManifestParser::once(const Tokens &tokens, int &firstLine) {
  if (firstLine)
    return error("duplicate '" + tokens[0] + "' statement (first on line " +
                 std::to_string(firstLine) + ")");
  firstLine = line;
  return Status();
}

Status ManifestParser::parseTarget(const Tokens &tokens) {
  if (tokens.size() != 2)
    return usage("target <arch>");
  if (Status status = once(tokens, targetLine); !status.ok())
    return status;
  // sm_<major><minor> with an optional feature suffix: sm_90a, sm_100f.
  const std::string &arch = tokens[1];
  size_t digitsEnd = arch.find_first_not_of("0123456789", 3);
  if (digitsEnd == std::string::npos)
    digitsEnd = arch.size();
  int64_t version = 0;
  bool hasSuffix = digitsEnd + 1 == arch.size() &&
                   (arch.back() == 'a' || arch.back() == 'f');
  if (arch.compare(0, 3, "sm_") != 0 || digitsEnd - 3 < 2 ||
      (digitsEnd != arch.size() && !hasSuffix) ||
      !parseInteger(arch.substr(3, digitsEnd - 3), version) || version > 999)
    return error("bad target '" + arch + "'; expected e.g. sm_90a");
  manifest.target = arch;
  manifest.computeMajor = static_cast<int>(version / 10);
  manifest.computeMinor = static_cast<int>(version % 10);
  return Status();
}

Status ManifestParser::parseBuffer(const Tokens &tokens, bool isWorkspace) {
  size_t fixed = isWorkspace ? 3 : 4;
  if (tokens.size() < fixed || tokens.size() > fixed + MOE_MAX_RANK)
    return usage(isWorkspace ? "workspace <name> <dtype> <dim>... (0 to 4 dims)"
                             : "tensor <name> input|output <dtype> <dim>... "
                               "(0 to 4 dims)");
  BufferDecl buffer;
  buffer.name = tokens[1];
  if (!isWorkspace) {
    if (tokens[2] != "input" && tokens[2] != "output")
      return error("unknown role '" + tokens[2] +
                   "'; expected input or output");
    buffer.role = tokens[2] == "input" ? MOE_ROLE_INPUT : MOE_ROLE_OUTPUT;
  }
  if (Status status = parseDtype(tokens[fixed - 1], buffer.dtype); !status.ok())
    return status;
  buffer.dims.resize(tokens.size() - fixed);
  for (size_t i = 0; i < buffer.dims.size(); ++i)
    if (Status status = parseExpression(tokens[fixed + i],
                                        "dim " + std::to_string(i) + " of '" +
                                            buffer.name + "'",
                                        buffer.dims[i]);
        !status.ok())
      return status;

  std::vector<BufferDecl> &buffers =
      isWorkspace ? variant().workspaces : manifest.tensors;
  Symbol symbol{SymbolKind::Buffer,
                BufferRef{isWorkspace, static_cast<int>(buffers.size())}, 0,
                line};
  if (Status status = define(buffer.name, symbol, !isWorkspace); !status.ok())
    return status;
  if (isWorkspace)
    if (Status status = shareAllocation(buffer); !status.ok())
      return status;
  buffers.push_back(std::move(buffer));
  return Status();
}

Status ManifestParser::parseExchange(const Tokens &tokens) {
  if (manifest.version < 3)
    return error("'exchange' needs bundle format version 3 ('moe-bundle 3')");
  if (tokens.size() != 6 || tokens[2] != "world" || tokens[4] != "rank")
    return usage("exchange <tensor> world <int> rank <int>");
  const Symbol *symbol = lookup(tokens[1]);
  if (!symbol || symbol->kind != SymbolKind::Buffer ||
      symbol->buffer.isWorkspace)
    return error("'" + tokens[1] + "' is not a tensor defined above");
  BufferDecl &tensor = manifest.tensors[symbol->buffer.index];
  if (tensor.world)
    return error("duplicate 'exchange' of tensor '" + tensor.name + "'");
  int64_t world = 0, rank = 0;
  if (!parseInteger(tokens[3], world) || world < 1 || world > kMaxWorld)
    return error("bad world '" + tokens[3] + "'; expected an integer in [1, " +
                 std::to_string(kMaxWorld) + "]");
  if (!parseInteger(tokens[5], rank) || rank >= world)
    return error("bad rank '" + tokens[5] + "'; expected an integer in [0, " +
                 std::to_string(world) + ")");
  tensor.world = static_cast<int>(world);
  tensor.rank = static_cast<int>(rank);
  return Status();
}

Status ManifestParser::shareAllocation(BufferDecl &workspace) {
  Allocation allocation{static_cast<int>(manifest.workspaceNames.size()),
                        workspace.dtype, line};
  auto [first, inserted] = allocations.emplace(workspace.name, allocation);
  if (inserted)
    manifest.workspaceNames.push_back(workspace.name);
  else if (first->second.dtype != workspace.dtype)
    return error("workspace '" + workspace.name + "' is " +
                 dtypeName(workspace.dtype) + " here but " +
                 dtypeName(first->second.dtype) + " on line " +
                 std::to_string(first->second.line) +
                 "; the workspaces of one name share an allocation and "
                 "need one element type");
  workspace.allocation = first->second.index;
  return Status();
}

Status ManifestParser::parseZero(const Tokens &tokens) {
  if (tokens.size() != 2)
    return usage("zero <name>");
  BufferRef buffer;
  if (Status status = lookupBuffer(tokens[1], buffer); !status.ok())
    return status;
  if (!buffer.isWorkspace &&
      manifest.tensors[buffer.index].role == MOE_ROLE_INPUT)
    return error("cannot zero input tensor '" + tokens[1] + "'");
  variant().zeros.push_back(buffer);
  return Status();
}

Status ManifestParser::parseTensorMap(const Tokens &tokens) {
  if (tokens.size() < 4)
    return usage("tensormap <name> <tensor> <dtype> rank <r> dims <d>... "
                 "strides <s>... box <b>... swizzle <bytes> [oob zero|nan]");
  TensorMapDecl map;
  map.name = tokens[1];
  if (Status status = lookupBuffer(tokens[2], map.buffer); !status.ok())
    return status;
  if (Status status = parseDtype(tokens[3], map.dtype); !status.ok())
    return status;

  size_t next = 4;
  int64_t rank = 0;
  if (Status status = expectKeyword(tokens, next, "rank"); !status.ok())
    return status;
  if (next == tokens.size() || !parseInteger(tokens[next], rank) || rank < 1 ||
      rank > kMaxTensorMapRank)
    return error("bad tensor map rank; expected 1 to " +
                 std::to_string(kMaxTensorMapRank));
  ++next;
  map.dims.resize(rank);
  map.strides.resize(rank - 1);
  map.box.resize(rank);
  Status status = parseSection(tokens, next, "dims", map.dims.data(), rank);
  if (status.ok())
    status =
        parseSection(tokens, next, "strides", map.strides.data(), rank - 1);
  if (status.ok())
    status = parseSection(tokens, next, "box", map.box.data(), rank);
  if (status.ok())
    status = expectKeyword(tokens, next, "swizzle");
  if (!status.ok())
    return status;
  int64_t swizzle = -1;
  if (next == tokens.size() || !parseInteger(tokens[next], swizzle) ||
      (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128))
    return error("bad swizzle; expected 0, 32, 64 or 128");
  map.swizzleBytes = static_cast<int>(swizzle);
  ++next;
  if (next < tokens.size()) {
    if (status = expectKeyword(tokens, next, "oob"); !status.ok())
      return status;
    if (next == tokens.size() ||
        (tokens[next] != "zero" && tokens[next] != "nan"))
      return error("bad oob fill; expected zero or nan");
    map.oobNan = tokens[next++] == "nan";
  }
  if (next != tokens.size())
    return error("unexpected '" + tokens[next] + "' after the tensor map");

  Symbol symbol{SymbolKind::TensorMap, BufferRef(),
                static_cast<int>(variant().tensorMaps.size()), line};
  if (status = define(map.name, symbol, /*global=*/false); !status.ok())
    return status;
  variant().tensorMaps.push_back(std::move(map));
  return Status();
}

Status ManifestParser::parseLaunch(const Tokens &tokens) {
  if (tokens.size() < 2)
    return usage("launch <kernel> grid <x> <y> <z> block <x> <y> <z> smem "
                 "<bytes> [cluster <x> <y> <z>] [dependent] args <arg>...");
  LaunchDecl launch;
  launch.kernel = tokens[1];
  launch.line = line;
  size_t next = 2;
  Status status = parseSection(tokens, next, "grid", launch.grid.data(), 3);
  if (status.ok())
    status = parseSection(tokens, next, "block", launch.block.data(), 3);
  if (status.ok())
    status = parseSection(tokens, next, "smem", &launch.smem, 1);
  if (status.ok() && next < tokens.size() && tokens[next] == "cluster") {
    launch.hasCluster = true;
    status = parseSection(tokens, next, "cluster", launch.cluster.data(), 3);
  }
  if (status.ok() && next < tokens.size() && tokens[next] == "dependent") {
    if (manifest.version < 3)
      return error("'dependent' needs bundle format version 3 ('moe-bundle "
                   "3')");
    launch.dependent = true;
    ++next;
  }
  if (status.ok())
    status = expectKeyword(tokens, next, "args");
  for (; status.ok() && next < tokens.size(); ++next) {
    launch.args.emplace_back();
    status = parseLaunchArg(tokens[next], launch.args.back());
  }
  if (!status.ok())
    return status;
  variant().launches.push_back(std::move(launch));
  return Status();
}

Status ManifestParser::parseLaunchArg(const std::string &token,
                                      LaunchArg &arg) {
  size_t colon = token.find(':');
  if (colon == std::string::npos) {
    arg.kind = LaunchArg::Kind::Buffer;
    return lookupBuffer(token, arg.buffer);
  }
  std::string prefix = token.substr(0, colon), rest = token.substr(colon + 1);
  if (prefix == "i32" || prefix == "i64") {
    arg.kind = prefix == "i32" ? LaunchArg::Kind::I32 : LaunchArg::Kind::I64;
    return parseExpression(rest, "argument '" + token + "'", arg.scalar);
  }
  if (prefix == "peers") {
    arg.kind = LaunchArg::Kind::Peers;
    if (Status status = lookupBuffer(rest, arg.buffer); !status.ok())
      return status;
    if (arg.buffer.isWorkspace || !manifest.tensors[arg.buffer.index].world)
      return error("'" + token + "' names '" + rest +
                   "', which is no tensor with an 'exchange' statement: only "
                   "an exchange buffer has a table of its ranks' slices");
    return Status();
  }
  if (prefix != "map")
    return error("bad argument '" + token +
                 "'; expected a name, i32:<expr>, i64:<expr>, map:<name> or "
                 "peers:<tensor>");
  arg.kind = LaunchArg::Kind::TensorMap;
  const Symbol *symbol = lookup(rest);
  if (!symbol || symbol->kind != SymbolKind::TensorMap)
    return error("'" + rest + "' is not a tensor map defined above");
  arg.tensorMap = symbol->tensorMap;
  return Status();
}

Status ManifestParser::define(const std::string &name, const Symbol &symbol,
                              bool global) {
  if (!isName(name))
    return error("bad name '" + name + "'; names match [A-Za-z_][A-Za-z0-9_]*");
  if (const Symbol *existing = lookup(name))
    return error("'" + name + "' is already defined on line " +
                 std::to_string(existing->line));
  (global ? globals : variantSymbols).emplace(name, symbol);
  return Status();
}

const ManifestParser::Symbol *
ManifestParser::lookup(const std::string &name) const {
  for (const std::map<std::string, Symbol> *scope :
       {&variantSymbols, &globals}) {
    auto symbol = scope->find(name);
    if (symbol != scope->end())
      return &symbol->second;
  }
  return nullptr;
}

Status ManifestParser::lookupBuffer(const std::string &name,
                                    BufferRef &buffer) const {
  const Symbol *symbol = lookup(name);
  if (!symbol || symbol->kind != SymbolKind::Buffer)
    return error("'" + name + "' is not a tensor or workspace defined above");
  buffer = symbol->buffer;
  return Status();
}

Status ManifestParser::parseDtype(const std::string &token,
                                  MoeDtype &dtype) const {
  for (int i = 0; i < kNumDtypes; ++i) {
    if (token == kDtypeNames[i]) {
      dtype = static_cast<MoeDtype>(i);
      return Status();
    }
  }
  return error("unknown element type '" + token +
               "'; expected f32, bf16, f16, i32, i64, u8 or f8e4m3");
}

Status ManifestParser::parseExpression(const std::string &token,
                                       const std::string &what,
                                       Expression &expression) const {
  Status status = Expression::parse(token, expression);
  return status.ok() ? status : error("bad " + what + ": " + status.message());
}

Status ManifestParser::expectKeyword(const Tokens &tokens, size_t &next,
                                     const char *keyword) const {
  if (next == tokens.size())
    return error(std::string("expected '") + keyword +
                 "' at the end of the line");
  if (tokens[next] != keyword)
    return error(std::string("expected '") + keyword + "', got '" +
                 tokens[next] + "'");
  ++next;
  return Status();
}

Status ManifestParser::parseSection(const Tokens &tokens, size_t &next,
                                    const char *keyword,
                                    Expression *expressions,
                                    size_t count) const {
  if (Status status = expectKeyword(tokens, next, keyword); !status.ok())
    return status;
  if (tokens.size() - next < count)
    return error("expected " + std::to_string(count) + " values after '" +
                 keyword + "'");
  for (size_t i = 0; i < count; ++i, ++next)
    if (Status status = parseExpression(
            tokens[next], std::string(keyword) + " value", expressions[i]);
        !status.ok())
      return status;
  return Status();
}
} // namespace

const char *moe::runtime::dtypeName(int32_t dtype) {
  return dtype >= 0 && dtype < kNumDtypes ? kDtypeNames[dtype] : "?";
}

int64_t moe::runtime::dtypeBytes(int32_t dtype) {
  return dtype >= 0 && dtype < kNumDtypes ? kDtypeBytes[dtype] : 0;
}

Status moe::runtime::parseManifest(const std::string &text,
                                   const std::string &source,
                                   Manifest &manifest) {
  manifest = Manifest();
  return ManifestParser(source, manifest).parse(text);
}

Status moe::runtime::checkLaunchLimits(
    const DeviceLimits &device, const KernelLimits &kernel,
    const unsigned grid[3], const unsigned block[3], const unsigned *cluster,
    int64_t smem, int64_t tokens, const std::string &owner) {
  auto fail = [&](const std::string &what) {
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  owner + ": " + what + " at T=" + std::to_string(tokens));
  };
  // Messages are built on failure only: a run allocates nothing.
  static const char *const kAxes[] = {"x", "y", "z"};
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    const char *axis = kAxes[i];
    if (grid[i] > device.maxGrid[i])
      return fail(std::string("grid ") + axis + " " + std::to_string(grid[i]) +
                  " exceeds the device's " + std::to_string(device.maxGrid[i]));
    if (block[i] > device.maxBlock[i])
      return fail(std::string("block ") + axis + " " +
                  std::to_string(block[i]) + " exceeds the device's " +
                  std::to_string(device.maxBlock[i]));
    if (cluster && grid[i] % cluster[i])
      return fail(std::string("grid ") + axis + " " + std::to_string(grid[i]) +
                  " is no multiple of the cluster's " +
                  std::to_string(cluster[i]));
    threads *= block[i];
  }
  int64_t maxThreads =
      std::min(device.maxThreadsPerBlock, kernel.maxThreadsPerBlock);
  if (threads > maxThreads)
    return fail(std::to_string(threads) + " threads per block exceed the " +
                std::to_string(maxThreads) + " the kernel can have");
  return checkSharedMemoryLimit(device, kernel, smem, tokens, owner);
}

Status moe::runtime::checkSharedMemoryLimit(const DeviceLimits &device,
                                            const KernelLimits &kernel,
                                            int64_t smem, int64_t tokens,
                                            const std::string &owner) {
  if (kernel.staticShared + smem <= device.maxSharedPerBlock)
    return Status();
  return Status(MOE_ERROR_INVALID_BUNDLE,
                owner + ": smem " + std::to_string(smem) +
                    " at T=" + std::to_string(tokens) + " and the kernel's " +
                    std::to_string(kernel.staticShared) +
                    " static bytes exceed the device's " +
                    std::to_string(device.maxSharedPerBlock) +
                    " bytes of shared memory per block");
}

Status moe::runtime::checkTensorMapBox(const TensorMapDecl &map,
                                       const uint32_t *box, int64_t tokens,
                                       const std::string &owner) {
  auto fail = [&](const std::string &what) {
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  owner + ": " + what + " at T=" + std::to_string(tokens));
  };
  for (size_t i = 0; i < map.box.size(); ++i)
    if (box[i] < 1 || box[i] > kMaxTensorMapBox)
      return fail("box size " + std::to_string(i) + " is " +
                  std::to_string(box[i]) + ", outside [1, " +
                  std::to_string(kMaxTensorMapBox) + "]");
  int64_t innerBytes = int64_t(box[0]) * dtypeBytes(map.dtype);
  if (innerBytes % 16)
    return fail("the innermost box is " + std::to_string(innerBytes) +
                " bytes, not a multiple of 16");
  if (map.swizzleBytes && innerBytes > map.swizzleBytes)
    return fail("the innermost box is " + std::to_string(innerBytes) +
                " bytes, wider than its " + std::to_string(map.swizzleBytes) +
                "-byte swizzle");
  return Status();
}

Status moe::runtime::readFile(const std::string &path, int64_t maxBytes,
                              std::string &contents) {
  // Non-blocking, so that opening a FIFO with no writer returns at once; the
  // type check below then refuses it.
  int file = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file < 0)
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  "cannot open " + path + ": " + std::strerror(errno));
  struct stat info;
  Status status;
  if (fstat(file, &info) != 0)
    status = Status(MOE_ERROR_INVALID_BUNDLE,
                    "cannot stat " + path + ": " + std::strerror(errno));
  else if (!S_ISREG(info.st_mode))
    status = Status(MOE_ERROR_INVALID_BUNDLE, path + " is not a regular file");
  else if (info.st_size > maxBytes)
    status = Status(MOE_ERROR_INVALID_BUNDLE,
                    path + " has " + std::to_string(info.st_size) +
                        " bytes, more than the " + std::to_string(maxBytes) +
                        " the runtime reads");
  // Read to the end, not to st_size: a file that grows meanwhile must still
  // stay within the bound.
  contents.clear();
  char chunk[1 << 16];
  while (status.ok()) {
    ssize_t size = read(file, chunk, sizeof(chunk));
    if (size < 0 && errno == EINTR)
      continue;
    if (size < 0)
      status = Status(MOE_ERROR_INVALID_BUNDLE,
                      "cannot read " + path + ": " + std::strerror(errno));
    else if (size == 0)
      break;
    else if (static_cast<int64_t>(contents.size()) + size > maxBytes)
      status = Status(MOE_ERROR_INVALID_BUNDLE, path + " grew past the " +
                                                    std::to_string(maxBytes) +
                                                    " bytes the runtime reads");
    else
      contents.append(chunk, static_cast<size_t>(size));
  }
  close(file);
  return status;
}

std::string moe::runtime::bundleFilePath(const std::string &directory,
                                         const std::string &file) {
  return directory.empty() ? file : directory + "/" + file;
}

Status moe::runtime::loadManifest(const std::string &directory,
                                  Manifest &manifest) {
  std::string path = bundleFilePath(directory, "manifest.txt");
  std::string text;
  if (Status status = readFile(path, kMaxManifestBytes, text); !status.ok())
    return status;
  if (Status status = parseManifest(text, path, manifest); !status.ok())
    return status;
  std::string missing =
      manifest.ptx.empty()
          ? manifest.cubin + " does not exist"
          : "neither " + manifest.cubin + " nor " + manifest.ptx + " exists";
  if (!isRegularFile(bundleFilePath(directory, manifest.cubin)))
    manifest.cubin.clear();
  if (!manifest.ptx.empty() &&
      !isRegularFile(bundleFilePath(directory, manifest.ptx)))
    manifest.ptx.clear();
  if (manifest.cubin.empty() && manifest.ptx.empty())
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  path + ": " + missing + " in " + directory);
  return Status();
}

Status moe::runtime::evaluateDims(const BufferDecl &buffer, int64_t tokens,
                                  int64_t *dims) {
  for (size_t i = 0; i < buffer.dims.size(); ++i) {
    if (Status status = buffer.dims[i].evaluate(tokens, dims[i]); !status.ok())
      return status;
    if (dims[i] < 0)
      return Status(MOE_ERROR_INVALID_BUNDLE,
                    "dim " + std::to_string(i) + " of '" + buffer.name +
                        "' is " + std::to_string(dims[i]) +
                        " at T=" + std::to_string(tokens));
  }
  return Status();
}

Status moe::runtime::bufferBytes(const BufferDecl &buffer, int64_t tokens,
                                 int64_t &bytes) {
  int64_t dims[MOE_MAX_RANK];
  if (Status status = evaluateDims(buffer, tokens, dims); !status.ok())
    return status;
  bytes = dtypeBytes(buffer.dtype);
  for (size_t i = 0; i < buffer.dims.size(); ++i)
    if (__builtin_mul_overflow(bytes, dims[i], &bytes))
      return Status(MOE_ERROR_INVALID_BUNDLE,
                    "the size of '" + buffer.name +
                        "' overflows at T=" + std::to_string(tokens));
  return Status();
}

Status moe::runtime::workspaceAllocationBytes(const Manifest &manifest,
                                              std::vector<int64_t> &bytes) {
  bytes.assign(manifest.workspaceNames.size(), 0);
  for (const Variant &variant : manifest.variants) {
    for (const BufferDecl &workspace : variant.workspaces) {
      int64_t needed = 0;
      if (Status status = bufferBytes(workspace, manifest.tokensMax, needed);
          !status.ok())
        return status;
      int64_t &allocated = bytes[workspace.allocation];
      allocated = std::max(allocated, needed);
    }
  }
  return Status();
}

Status moe::runtime::checkTokens(const Manifest &manifest, int64_t tokens) {
  if (tokens < 1 || tokens > manifest.tokensMax)
    return invalidArgument("T=" + std::to_string(tokens) + " is outside [1, " +
                           std::to_string(manifest.tokensMax) + "]");
  return Status();
}

Status moe::runtime::selectVariant(const Manifest &manifest, int64_t tokens,
                                   int &index) {
  if (Status status = checkTokens(manifest, tokens); !status.ok())
    return status;
  auto serving = std::find_if(
      manifest.variants.begin(), manifest.variants.end(),
      [&](const Variant &variant) { return variant.maxTokens >= tokens; });
  index = static_cast<int>(serving - manifest.variants.begin());
  return Status();
}

Status moe::runtime::checkRunArguments(const Manifest &manifest, int64_t tokens,
                                       const MoeTensor *tensors, int count) {
  if (Status status = checkTokens(manifest, tokens); !status.ok())
    return status;
  if (count != static_cast<int>(manifest.tensors.size()))
    return invalidArgument("expected " +
                           std::to_string(manifest.tensors.size()) +
                           " tensors, got " + std::to_string(count));
  if (count && !tensors)
    return invalidArgument("the tensor array is null");
  for (int i = 0; i < count; ++i) {
    const BufferDecl &declared = manifest.tensors[i];
    const MoeTensor &tensor = tensors[i];
    // Messages are built only on failure: a run allocates nothing.
    auto fail = [&](const std::string &message) {
      return invalidArgument("tensor " + std::to_string(i) + " ('" +
                             declared.name + "'): " + message);
    };
    if (tensor.dtype != declared.dtype)
      return fail(std::string("element type is ") + dtypeName(tensor.dtype) +
                  ", expected " + dtypeName(declared.dtype));
    if (tensor.rank != static_cast<int32_t>(declared.dims.size()))
      return fail("rank is " + std::to_string(tensor.rank) + ", expected " +
                  std::to_string(declared.dims.size()));
    int64_t dims[MOE_MAX_RANK];
    if (Status status = evaluateDims(declared, tokens, dims); !status.ok())
      return status;
    if (!std::equal(dims, dims + tensor.rank, tensor.dims))
      return fail("dims are " + formatDims(tensor.dims, tensor.rank) +
                  ", expected " + formatDims(dims, tensor.rank) +
                  " at T=" + std::to_string(tokens));
    if (!tensor.data)
      return fail("null pointer");
    uintptr_t address = reinterpret_cast<uintptr_t>(tensor.data);
    if (address % 16)
      return fail("pointer 0x" + toHex(address) + " is not 16-byte aligned");
  }
  return Status();
}
