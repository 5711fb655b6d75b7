//===- MoeAttrs.cpp - moe enums and attributes ----------------------------===//

#include "moe/Dialect/Moe/IR/MoeAttrs.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"
#include "moe/Dialect/Moe/IR/MoeLimits.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/Moe/IR/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/Moe/IR/MoeAttrs.cpp.inc"

void MoeDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/Dialect/Moe/IR/MoeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RouterAttr
//===----------------------------------------------------------------------===//

LogicalResult RouterAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 Scoring scoring, int64_t topK,
                                 int64_t numGroups, int64_t topkGroups,
                                 bool renormalize, APFloat routedScalingFactor,
                                 int64_t numSharedExperts) {
  if (topK < 1)
    return emitError() << "top_k must be at least 1, got " << topK;
  if (numGroups < 1)
    return emitError() << "num_groups must be at least 1, got " << numGroups;
  if (numGroups > kMaxRouterGroups)
    return emitError() << "num_groups must be at most " << kMaxRouterGroups
                       << " (the GPU gate ranks the groups unrolled), got "
                       << numGroups;
  if (topkGroups < 1 || topkGroups > numGroups)
    return emitError() << "topk_groups must be in [1, num_groups = "
                       << numGroups << "], got " << topkGroups;
  if (!routedScalingFactor.isFiniteNonZero() ||
      routedScalingFactor.isNegative())
    return emitError() << "routed_scaling_factor must be finite and positive, "
                          "got "
                       << routedScalingFactor.convertToDouble();
  if (numSharedExperts < 0)
    return emitError() << "num_shared_experts must be non-negative, got "
                       << numSharedExperts;
  // Checked apart first: their sum must not overflow.
  if (topK > kMaxRouterSlots || numSharedExperts > kMaxRouterSlots ||
      topK + numSharedExperts > kMaxRouterSlots)
    return emitError() << "top_k + num_shared_experts (the slots per token) "
                       << "must be at most " << kMaxRouterSlots
                       << " (the GPU gate fills them unrolled), got " << topK
                       << " + " << numSharedExperts;
  return success();
}

LogicalResult
RouterAttr::verifyForExperts(function_ref<InFlightDiagnostic()> emitError,
                             int64_t numExperts) const {
  int64_t numGroups = getNumGroups();
  // The shared experts' ids E..E+X-1 are i32 like every expert id.
  if (numExperts > kMaxSize - getNumSharedExperts())
    return emitError() << "the expert count (" << numExperts
                       << ") + num_shared_experts (" << getNumSharedExperts()
                       << ") must be at most " << kMaxSize;
  if (numExperts % numGroups != 0)
    return emitError() << "num_groups (" << numGroups
                       << ") must divide the expert count (" << numExperts
                       << ")";
  int64_t groupSize = numExperts / numGroups;
  // A group scores the sum of its two best experts, so it needs two.
  if (numGroups > 1 && groupSize < 2)
    return emitError() << "grouped routing needs at least 2 experts per "
                          "group, got "
                       << groupSize;
  int64_t eligible = groupSize * getTopkGroups();
  if (getTopK() > eligible)
    return emitError() << "top_k (" << getTopK() << ") exceeds the " << eligible
                       << " experts of the topk_groups (" << getTopkGroups()
                       << ") chosen groups";
  return success();
}

//===----------------------------------------------------------------------===//
// SwigluAttr
//===----------------------------------------------------------------------===//

LogicalResult SwigluAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 APFloat alpha, APFloat limit) {
  if (!alpha.isFinite())
    return emitError() << "alpha must be finite, got "
                       << alpha.convertToDouble();
  if (!limit.isFiniteNonZero() || limit.isNegative())
    return emitError() << "limit must be finite and positive, got "
                       << limit.convertToDouble();
  return success();
}

//===----------------------------------------------------------------------===//
// ExpertParallelAttr
//===----------------------------------------------------------------------===//

LogicalResult
ExpertParallelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                           int64_t world, int64_t rank) {
  if (world < 1 || world > kMaxSize)
    return emitError() << "world must be in [1, " << kMaxSize << "], got "
                       << world;
  if (rank < 0 || rank >= world)
    return emitError() << "rank must be in [0, world = " << world << "), got "
                       << rank;
  return success();
}

//===----------------------------------------------------------------------===//
// QuantizationAttr
//===----------------------------------------------------------------------===//

/// Scale blocks wider than a GEMM tile would be; the checkpoints use 128.
static constexpr int64_t kMaxScaleBlockSize = 1024;
/// The OCP MX formats' block: 32 values share one e8m0 scale.
static constexpr int64_t kMxBlockSize = 32;

LogicalResult
QuantizationAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         WeightScaling weights, ActivationScaling activations,
                         int64_t blockSize) {
  if (blockSize < 1 || blockSize > kMaxScaleBlockSize)
    return emitError() << "block_size must be in [1, " << kMaxScaleBlockSize
                       << "], got " << blockSize;
  // MXFP4 is a weight-only format of its own block size; the fp8 weights
  // pair with quantized activations.
  bool mxfp4 = weights == WeightScaling::mxfp4;
  if (mxfp4 != (activations == ActivationScaling::none))
    return emitError() << "weights = " << stringifyWeightScaling(weights)
                       << " pairs with activations = "
                       << (mxfp4 ? "none"
                                 : "token, token_group or static_tensor")
                       << ", got " << stringifyActivationScaling(activations);
  if (mxfp4 && blockSize != kMxBlockSize)
    return emitError() << "weights = mxfp4 scales blocks of " << kMxBlockSize
                       << " values (block_size = " << kMxBlockSize
                       << "), got block_size = " << blockSize;
  if (mxfp4)
    return success();
  // A K block's partial sum is scaled by one activation and one weight
  // scale only when both change at the same K boundaries.
  bool blockWeights = weights == WeightScaling::block;
  bool groupActivations = activations == ActivationScaling::token_group;
  if (blockWeights != groupActivations)
    return emitError() << "weights = " << stringifyWeightScaling(weights)
                       << " pairs with activations = "
                       << (blockWeights ? "token_group"
                                        : "token or static_tensor")
                       << ", got " << stringifyActivationScaling(activations);
  return success();
}

SmallVector<int64_t> QuantizationAttr::getWeightScalesShape(int64_t numExperts,
                                                            int64_t n,
                                                            int64_t k) const {
  switch (getWeights()) {
  case WeightScaling::tensor:
    return {numExperts};
  case WeightScaling::channel:
    return {numExperts, n};
  case WeightScaling::block:
    return {numExperts, llvm::divideCeilSigned(n, getBlockSize()),
            llvm::divideCeilSigned(k, getBlockSize())};
  case WeightScaling::mxfp4:
    return {numExperts, n, llvm::divideCeilSigned(k, getBlockSize())};
  }
  llvm_unreachable("unknown weight scaling");
}

//===----------------------------------------------------------------------===//
// GemmConfigAttr
//===----------------------------------------------------------------------===//

LogicalResult
GemmConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t blockM, int64_t blockN, int64_t blockK,
                       int64_t numStages, int64_t numWarpgroups, int64_t splitK,
                       bool tmaA, bool tmaB, int64_t clusterM, int64_t clusterN,
                       bool persistent, bool warpSpecialized, bool streamK) {
  auto isPow2In = [](int64_t v, int64_t lo, int64_t hi) {
    return v >= lo && v <= hi && llvm::isPowerOf2_64(v);
  };
  if (!isPow2In(blockM, 16, 256))
    return emitError() << "block_m must be a power of two in [16, 256], got "
                       << blockM;
  // wgmma takes N in multiples of 8; 16 keeps bf16/fp16 rows 32-byte sized.
  if (blockN < 16 || blockN > 256 || blockN % 16 != 0)
    return emitError() << "block_n must be a multiple of 16 in [16, 256], got "
                       << blockN;
  if (!isPow2In(blockK, 16, 256))
    return emitError() << "block_k must be a power of two in [16, 256], got "
                       << blockK;
  if (numStages < 1 || numStages > 8)
    return emitError() << "num_stages must be in [1, 8], got " << numStages;
  if (numWarpgroups < 1 || numWarpgroups > 4)
    return emitError() << "num_warpgroups must be in [1, 4], got "
                       << numWarpgroups;
  if (splitK < 1)
    return emitError() << "split_k must be at least 1, got " << splitK;
  if (splitK > kMaxSplitK)
    return emitError() << "split_k must be at most " << kMaxSplitK
                       << " (the reduction sums the splits unrolled), got "
                       << splitK;
  if (!isPow2In(clusterM, 1, 8) || !isPow2In(clusterN, 1, 8) ||
      clusterM * clusterN > 8)
    return emitError() << "cluster " << clusterM << "x" << clusterN
                       << " must have power-of-two sides and at most 8 "
                          "blocks (the portable cluster size)";
  if (streamK && (!persistent || splitK != 1))
    return emitError() << "stream_k needs a persistent grid and split_k = 1 "
                          "(it splits the K steps of the last tiles itself)";
  return success();
}

//===----------------------------------------------------------------------===//
// Size expressions and the lists of the launch plan
//===----------------------------------------------------------------------===//

namespace {
/// Reads a size expression by the grammar of docs/BUNDLE.md, nested at most
/// as deep as the runtime evaluates.
class SizeExpressionReader {
public:
  explicit SizeExpressionReader(StringRef text) : rest(text) {}

  bool readsWhole() { return readExpression(0) && rest.empty(); }

private:
  static constexpr unsigned kMaxNesting = 32;

  bool readExpression(unsigned nesting) {
    if (!readTerm(nesting))
      return false;
    while (rest.consume_front("+") || rest.consume_front("-"))
      if (!readTerm(nesting))
        return false;
    return true;
  }
  bool readTerm(unsigned nesting) {
    if (!readFactor(nesting))
      return false;
    while (rest.consume_front("*"))
      if (!readFactor(nesting))
        return false;
    return true;
  }
  bool readFactor(unsigned nesting) {
    if (rest.consume_front("T"))
      return true;
    if (!rest.empty() && llvm::isDigit(rest.front())) {
      StringRef digits = rest.take_while(llvm::isDigit);
      rest = rest.drop_front(digits.size());
      int64_t value;
      return !digits.getAsInteger(10, value);
    }
    if (nesting == kMaxNesting)
      return false;
    for (StringRef call : {"cdiv(", "max(", "min("})
      if (rest.consume_front(call))
        return readExpression(nesting + 1) && rest.consume_front(",") &&
               readExpression(nesting + 1) && rest.consume_front(")");
    return rest.consume_front("(") && readExpression(nesting + 1) &&
           rest.consume_front(")");
  }

  StringRef rest;
};

/// Whether `text` is a size expression in the token count T, as the bundle
/// format defines them: integers, `T`, `+`, `-`, `*`, parentheses and
/// `cdiv`/`min`/`max` calls, without spaces.
bool isSizeExpression(StringRef text) {
  return SizeExpressionReader(text).readsWhole();
}

/// Names of the bundle format: `[A-Za-z_][A-Za-z0-9_]*`.
bool isBundleName(StringRef name) {
  auto isNameChar = [](char c) { return llvm::isAlnum(c) || c == '_'; };
  return !name.empty() && !llvm::isDigit(name.front()) &&
         llvm::all_of(name, isNameChar);
}
} // namespace

llvm::hash_code mlir::moe::hash_value(const LaunchArg &arg) {
  return llvm::hash_combine(arg.kind, arg.value);
}

ParseResult mlir::moe::detail::parseListElement(AsmParser &parser,
                                                int64_t &value) {
  return parser.parseInteger(value);
}

ParseResult mlir::moe::detail::parseListElement(AsmParser &parser,
                                                StringAttr &value) {
  std::string text;
  if (parser.parseString(&text))
    return failure();
  value = parser.getBuilder().getStringAttr(text);
  return success();
}

ParseResult mlir::moe::detail::parseListElement(AsmParser &parser,
                                                LaunchArg &value) {
  value.kind = LaunchArgKind::buffer;
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (succeeded(parser.parseOptionalKeyword(&keyword))) {
    std::optional<LaunchArgKind> kind = symbolizeLaunchArgKind(keyword);
    if (!kind || *kind == LaunchArgKind::buffer)
      return parser.emitError(loc, "expected a quoted buffer name, 'map', "
                                   "'i32' or 'peers', got '")
             << keyword << "'";
    value.kind = *kind;
  }
  return parseListElement(parser, value.value);
}

void mlir::moe::detail::printListElement(AsmPrinter &printer, int64_t value) {
  printer << value;
}

void mlir::moe::detail::printListElement(AsmPrinter &printer,
                                         StringAttr value) {
  printer.printString(value.getValue());
}

void mlir::moe::detail::printListElement(AsmPrinter &printer,
                                         const LaunchArg &value) {
  if (value.kind != LaunchArgKind::buffer)
    printer << stringifyLaunchArgKind(value.kind) << ' ';
  printListElement(printer, value.value);
}

//===----------------------------------------------------------------------===//
// PlanBufferAttr
//===----------------------------------------------------------------------===//

LogicalResult
PlanBufferAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       BufferRole role, StringRef name, Type elementType,
                       ArrayRef<StringAttr> dims, ExpertParallelAttr exchange) {
  if (!isBundleName(name))
    return emitError() << "buffer name '" << name
                       << "' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)";
  if (!elementType.isIntOrFloat() || elementType.getIntOrFloatBitWidth() % 8)
    return emitError() << "buffer '" << name
                       << "' must hold integers or floats of whole bytes, not "
                       << elementType;
  for (StringAttr dim : dims)
    if (!isSizeExpression(dim.getValue()))
      return emitError() << "dim '" << dim.getValue() << "' of buffer '" << name
                         << "' is not a size expression in T";
  if (exchange && role == BufferRole::workspace)
    return emitError() << "workspace '" << name
                       << "' cannot be an exchange buffer: the caller binds "
                          "every rank's slice of one, which only a tensor has";
  return success();
}

//===----------------------------------------------------------------------===//
// PlanTensorMapAttr
//===----------------------------------------------------------------------===//

LogicalResult
PlanTensorMapAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          StringRef name, StringRef buffer,
                          ArrayRef<int64_t> box, int64_t swizzle) {
  if (!isBundleName(name))
    return emitError() << "tensor map name '" << name
                       << "' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)";
  // cuTensorMapEncodeTiled: rank 1 to 5, box sizes 1 to 256.
  if (box.empty() || box.size() > 5)
    return emitError() << "tensor map '" << name
                       << "' must have a box of rank 1 to 5, got rank "
                       << box.size();
  if (llvm::any_of(box, [](int64_t size) { return size < 1 || size > 256; }))
    return emitError() << "tensor map '" << name
                       << "' must have box sizes in [1, 256]";
  if (!llvm::is_contained({0, 32, 64, 128}, swizzle))
    return emitError() << "tensor map '" << name
                       << "' must have a swizzle of 0, 32, 64 or 128 bytes, "
                          "got "
                       << swizzle;
  return success();
}

//===----------------------------------------------------------------------===//
// LaunchPlanAttr
//===----------------------------------------------------------------------===//

LogicalResult
LaunchPlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       int64_t tokensMax, ArrayRef<PlanBufferAttr> buffers,
                       ArrayRef<StringAttr> zeroFill,
                       ArrayRef<PlanTensorMapAttr> tensorMaps) {
  if (tokensMax < 1)
    return emitError() << "tokens_max must be at least 1, got " << tokensMax;
  // Kernels take T as an i32.
  if (tokensMax > kMaxSize)
    return emitError() << "tokens_max must be at most " << kMaxSize << ", got "
                       << tokensMax;
  // Buffers and tensor maps share one namespace in the manifest.
  llvm::StringMap<PlanBufferAttr> bufferOf;
  llvm::StringSet<> names;
  for (PlanBufferAttr buffer : buffers) {
    if (!names.insert(buffer.getName()).second)
      return emitError() << "buffer '" << buffer.getName()
                         << "' is defined twice";
    bufferOf[buffer.getName()] = buffer;
  }
  for (StringAttr name : zeroFill)
    if (!bufferOf.count(name.getValue()))
      return emitError() << "zero_fill names '" << name.getValue()
                         << "', which is not a buffer of the plan";
  for (PlanTensorMapAttr map : tensorMaps) {
    if (!names.insert(map.getName()).second)
      return emitError() << "tensor map '" << map.getName()
                         << "' reuses the name of a buffer or tensor map";
    PlanBufferAttr buffer = bufferOf.lookup(map.getBuffer());
    if (!buffer)
      return emitError() << "tensor map '" << map.getName() << "' is over '"
                         << map.getBuffer()
                         << "', which is not a buffer of the plan";
    if (buffer.getDims().size() != map.getBox().size())
      return emitError() << "tensor map '" << map.getName() << "' has a box of "
                         << map.getBox().size() << " dims over buffer '"
                         << buffer.getName() << "' of "
                         << buffer.getDims().size();
  }
  return success();
}

PlanBufferAttr LaunchPlanAttr::lookupBuffer(StringRef name) const {
  for (PlanBufferAttr buffer : getBuffers())
    if (buffer.getName() == name)
      return buffer;
  return {};
}

PlanTensorMapAttr LaunchPlanAttr::lookupTensorMap(StringRef name) const {
  for (PlanTensorMapAttr map : getTensorMaps())
    if (map.getName() == name)
      return map;
  return {};
}

//===----------------------------------------------------------------------===//
// LaunchAttr
//===----------------------------------------------------------------------===//

LogicalResult LaunchAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 ArrayRef<StringAttr> grid,
                                 ArrayRef<int64_t> block, int64_t smem,
                                 ArrayRef<LaunchArg> args, bool dependent) {
  if (grid.size() != 3)
    return emitError() << "grid must have 3 sizes, got " << grid.size();
  for (StringAttr size : grid)
    if (!isSizeExpression(size.getValue()))
      return emitError() << "grid size '" << size.getValue()
                         << "' is not a size expression in T";
  if (block.size() != 3)
    return emitError() << "block must have 3 sizes, got " << block.size();
  // CUDA's limits on a block.
  constexpr int64_t kMaxThreads = 1024;
  if (llvm::any_of(
          block, [](int64_t size) { return size < 1 || size > kMaxThreads; }) ||
      block[0] * block[1] * block[2] > kMaxThreads)
    return emitError() << "block " << block[0] << "x" << block[1] << "x"
                       << block[2]
                       << " must have positive sizes and at most 1024 threads";
  if (smem < 0 || smem > std::numeric_limits<uint32_t>::max())
    return emitError() << "smem must be in [0, 2^32), got " << smem;
  for (const LaunchArg &arg : args) {
    StringRef value = arg.value.getValue();
    if (arg.kind == LaunchArgKind::i32 && !isSizeExpression(value))
      return emitError() << "argument '" << value
                         << "' is not a size expression in T";
    if (arg.kind != LaunchArgKind::i32 && !isBundleName(value))
      return emitError() << "argument '" << value
                         << "' is not a buffer or tensor map name";
  }
  return success();
}
