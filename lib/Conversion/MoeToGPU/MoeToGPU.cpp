//===- MoeToGPU.cpp - moe ops to GPU kernels and a launch plan ------------===//

#include "moe/Conversion/MoeToGPU/MoeToGPU.h"
#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/Conversion/MoeCommon/RoutingMath.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir {
namespace moe {
#define GEN_PASS_DEF_CONVERTMOETOGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace moe
} // namespace mlir

using namespace mlir;
using namespace mlir::moe;

namespace {

constexpr int64_t kWarpSize = 32;
/// The widest shared-memory access (ld.shared.v4.b32).
constexpr int64_t kSharedVectorBytes = 16;

/// One buffer of the launch plan.
struct Buffer {
  std::string name;
  StringRef role; // input, output or workspace
  Type elementType;
  SmallVector<std::string> dims;   // size expressions in T
  SmallVector<int64_t> shapeAtMax; // the sizes at T = tokens-max
};

/// Size expressions in the token count T (docs/BUNDLE.md), with their value
/// at tokens-max.
struct SizeExpr {
  std::string text;
  int64_t atMax;
};

/// A TMA descriptor the runtime builds over a buffer (a `tensormap` line):
/// the buffer's dims innermost first, with a box of `box` elements.
struct TensorMap {
  std::string name;
  unsigned buffer;
  SmallVector<int64_t> box; // innermost first
  int64_t swizzleBytes;
};

/// A kernel argument of the plan: a buffer's pointer or a tensor map by
/// value.
struct KernelArg {
  KernelArg(unsigned buffer) : index(buffer), isTensorMap(false) {}
  static KernelArg tensorMap(unsigned map) {
    KernelArg arg(map);
    arg.isTensorMap = true;
    return arg;
  }
  unsigned index;
  bool isTensorMap;
};

/// Collects buffers and kernels while the ops of a layer are compiled.
class PlanBuilder {
public:
  PlanBuilder(ModuleOp module, gpu::GPUModuleOp kernels, int64_t tokensMax)
      : module(module), kernels(kernels), tokensMax(tokensMax) {}

  SizeExpr tokens() const { return {"T", tokensMax}; }
  static SizeExpr constant(int64_t value) {
    return {std::to_string(value), value};
  }
  /// a * T + b.
  SizeExpr affine(int64_t a, int64_t b) const {
    std::string text = a == 1 ? "T" : "T*" + std::to_string(a);
    if (b)
      text += "+" + std::to_string(b);
    return {text, a * tokensMax + b};
  }
  static SizeExpr ceilDiv(const SizeExpr &value, int64_t divisor) {
    return {"cdiv(" + value.text + "," + std::to_string(divisor) + ")",
            static_cast<int64_t>(llvm::divideCeil(value.atMax, divisor))};
  }

  /// Registers `value` (a function argument, a result, or an op result) as a
  /// buffer whose dims are `dims`; returns its index.
  unsigned define(Value value, StringRef workspaceName,
                  ArrayRef<SizeExpr> dims) {
    auto found = bufferOf.find(value);
    if (found != bufferOf.end())
      return found->second;
    Buffer buffer;
    buffer.elementType = cast<ShapedType>(value.getType()).getElementType();
    for (const SizeExpr &dim : dims) {
      buffer.dims.push_back(dim.text);
      buffer.shapeAtMax.push_back(dim.atMax);
    }
    buffer.name = uniqueName(workspaceName);
    buffer.role = "workspace";
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      buffer.name = "arg" + std::to_string(argument.getArgNumber());
      buffer.role = "input";
    }
    bufferOf[value] = buffers.size();
    buffers.push_back(std::move(buffer));
    return buffers.size() - 1;
  }
  /// Registers a workspace that no tensor of the function holds.
  unsigned scratch(StringRef name, Type elementType, ArrayRef<SizeExpr> dims) {
    Buffer buffer{uniqueName(name), "workspace", elementType, {}, {}};
    for (const SizeExpr &dim : dims) {
      buffer.dims.push_back(dim.text);
      buffer.shapeAtMax.push_back(dim.atMax);
    }
    buffers.push_back(std::move(buffer));
    return buffers.size() - 1;
  }

  /// Gives an input tensor the dims an op derives for it (a `?` in the
  /// signature reads as T, but routing arrays are sized by the capacity).
  void refineInput(unsigned buffer, ArrayRef<SizeExpr> dims) {
    if (buffers[buffer].role != "input")
      return;
    buffers[buffer].dims.clear();
    buffers[buffer].shapeAtMax.clear();
    for (const SizeExpr &dim : dims) {
      buffers[buffer].dims.push_back(dim.text);
      buffers[buffer].shapeAtMax.push_back(dim.atMax);
    }
  }

  /// The buffer holding `value`, which an earlier op or the signature
  /// defined with its type's dims (dynamic dims are T).
  unsigned use(Value value) {
    auto found = bufferOf.find(value);
    if (found != bufferOf.end())
      return found->second;
    SmallVector<SizeExpr> dims;
    for (int64_t dim : cast<ShapedType>(value.getType()).getShape())
      dims.push_back(ShapedType::isDynamic(dim) ? tokens() : constant(dim));
    return define(value, "unnamed", dims);
  }
  void markOutputs(func::ReturnOp ret) {
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      Buffer &buffer = buffers[use(value)];
      buffer.name = "result" + std::to_string(index);
      buffer.role = "output";
    }
  }
  void zero(unsigned buffer) { zeroed.push_back(buffer); }

  /// Registers a TMA descriptor over `buffer` whose boxes are `box`
  /// elements (innermost first); returns its index for KernelArg::tensorMap.
  unsigned tensorMap(unsigned buffer, StringRef name, ArrayRef<int64_t> box,
                     int64_t swizzleBytes) {
    maps.push_back(
        {uniqueName(name), buffer, SmallVector<int64_t>(box), swizzleBytes});
    return maps.size() - 1;
  }

  /// Creates kernel `base_<n>` taking `args` (then T as i32), with
  /// `dynamicSharedBytes` of dynamic shared memory, and records its launch;
  /// moves the builder to the start of its body. A tensor map argument is an
  /// `!llvm.ptr` to the descriptor, listed in the kernel's `moe.tensor_maps`
  /// so that it is passed by value (moe-grid-constant-tensor-maps).
  gpu::GPUFuncOp createKernel(OpBuilder &builder, Location loc, StringRef base,
                              ArrayRef<KernelArg> args, ArrayRef<SizeExpr> grid,
                              ArrayRef<int64_t> block,
                              ArrayRef<MemRefType> workgroup = {},
                              int64_t dynamicSharedBytes = 0) {
    SmallVector<Type> types;
    SmallVector<int64_t> tensorMapArgs;
    for (const KernelArg &arg : args) {
      if (arg.isTensorMap) {
        tensorMapArgs.push_back(types.size());
        types.push_back(LLVM::LLVMPointerType::get(builder.getContext()));
        continue;
      }
      const Buffer &buffer = buffers[arg.index];
      types.push_back(MemRefType::get(buffer.shapeAtMax, buffer.elementType));
    }
    types.push_back(builder.getI32Type());
    builder.setInsertionPointToEnd(kernels.getBody());
    auto kernel = gpu::GPUFuncOp::create(
        builder, loc, (base + "_" + Twine(kernelCount++)).str(),
        builder.getFunctionType(types, {}),
        SmallVector<Type>(workgroup.begin(), workgroup.end()), TypeRange());
    kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                    builder.getUnitAttr());
    if (!tensorMapArgs.empty())
      kernel->setAttr("moe.tensor_maps",
                      builder.getDenseI64ArrayAttr(tensorMapArgs));
    // The NVPTX backend vectorizes shared-memory accesses up to 16 bytes:
    // make the buffers' alignment say so, whatever precedes them.
    for (unsigned index = 0; index < workgroup.size(); ++index)
      kernel.setWorkgroupAttributionAttr(
          index, LLVM::LLVMDialect::getAlignAttrName(),
          builder.getI64IntegerAttr(kSharedVectorBytes));
    Launch launch{
        kernel, SmallVector<KernelArg>(args), {}, {}, dynamicSharedBytes};
    for (const SizeExpr &size : grid)
      launch.grid.push_back(builder.getStringAttr(size.text));
    launch.block.assign(block.begin(), block.end());
    launches.push_back(std::move(launch));
    kernel.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr(
        {static_cast<int32_t>(block[0]), static_cast<int32_t>(block[1]),
         static_cast<int32_t>(block[2])}));
    builder.setInsertionPointToStart(&kernel.getBody().front());
    gpu::ReturnOp::create(builder, loc);
    builder.setInsertionPointToStart(&kernel.getBody().front());
    return kernel;
  }

  /// Writes the buffers and fills onto the kernel module.
  void finish(OpBuilder &builder) {
    SmallVector<Attribute> entries;
    for (const Buffer &buffer : buffers) {
      SmallVector<Attribute> dims;
      for (const std::string &dim : buffer.dims)
        dims.push_back(builder.getStringAttr(dim));
      entries.push_back(builder.getDictionaryAttr(
          {builder.getNamedAttr("name", builder.getStringAttr(buffer.name)),
           builder.getNamedAttr("role", builder.getStringAttr(buffer.role)),
           builder.getNamedAttr("type", TypeAttr::get(buffer.elementType)),
           builder.getNamedAttr("dims", builder.getArrayAttr(dims))}));
    }
    SmallVector<Attribute> zeros;
    for (unsigned buffer : zeroed)
      zeros.push_back(builder.getStringAttr(buffers[buffer].name));
    // Names are final only now: results are named when the return is seen.
    SmallVector<Attribute> mapEntries;
    for (const TensorMap &map : maps)
      mapEntries.push_back(tensorMapEntry(builder, map));
    for (Launch &launch : launches) {
      SmallVector<Attribute> argNames;
      for (const KernelArg &arg : launch.args)
        argNames.push_back(builder.getStringAttr(
            arg.isTensorMap ? "map:" + maps[arg.index].name
                            : buffers[arg.index].name));
      argNames.push_back(builder.getStringAttr("i32:T"));
      launch.kernel->setAttr(
          "moe.launch",
          builder.getDictionaryAttr(
              {builder.getNamedAttr("grid", builder.getArrayAttr(launch.grid)),
               builder.getNamedAttr("block",
                                    builder.getDenseI64ArrayAttr(launch.block)),
               builder.getNamedAttr(
                   "smem", builder.getStringAttr(
                               std::to_string(launch.dynamicSharedBytes))),
               builder.getNamedAttr("args", builder.getArrayAttr(argNames))}));
    }
    kernels->setAttr("moe.buffers", builder.getArrayAttr(entries));
    kernels->setAttr("moe.zero", builder.getArrayAttr(zeros));
    kernels->setAttr("moe.tensormaps", builder.getArrayAttr(mapEntries));
    kernels->setAttr("moe.tokens_max", builder.getI64IntegerAttr(tokensMax));
  }

  ModuleOp module;
  gpu::GPUModuleOp kernels;
  int64_t tokensMax;

private:
  /// `base`, or `base_<n>` when a layer has several ops of one kind.
  std::string uniqueName(StringRef base) {
    unsigned uses = nameUses[base]++;
    return uses ? (base + "_" + Twine(uses)).str() : base.str();
  }

  /// A kernel and the buffers it takes, named when the plan is finished.
  struct Launch {
    gpu::GPUFuncOp kernel;
    SmallVector<KernelArg> args;
    SmallVector<Attribute> grid;
    SmallVector<int64_t> block;
    int64_t dynamicSharedBytes;
  };

  /// The `tensormap` statement of `map` as a dictionary: its buffer's dims
  /// innermost first and the byte strides of the outer ones, as size
  /// expressions.
  DictionaryAttr tensorMapEntry(OpBuilder &builder, const TensorMap &map) {
    const Buffer &buffer = buffers[map.buffer];
    int64_t elementBytes = buffer.elementType.getIntOrFloatBitWidth() / 8;
    SmallVector<Attribute> dims, strides;
    // The stride of each dim: a number while the inner dims are constants,
    // then a product of expressions.
    std::string stride = std::to_string(elementBytes);
    for (const std::string &dim : llvm::reverse(buffer.dims)) {
      if (!dims.empty())
        strides.push_back(builder.getStringAttr(stride));
      dims.push_back(builder.getStringAttr(dim));
      int64_t strideValue, dimValue;
      if (!StringRef(stride).getAsInteger(10, strideValue) &&
          !StringRef(dim).getAsInteger(10, dimValue))
        stride = std::to_string(strideValue * dimValue);
      else
        stride += "*(" + dim + ")";
    }
    return builder.getDictionaryAttr(
        {builder.getNamedAttr("name", builder.getStringAttr(map.name)),
         builder.getNamedAttr("tensor", builder.getStringAttr(buffer.name)),
         builder.getNamedAttr("type", TypeAttr::get(buffer.elementType)),
         builder.getNamedAttr("dims", builder.getArrayAttr(dims)),
         builder.getNamedAttr("strides", builder.getArrayAttr(strides)),
         builder.getNamedAttr("box", builder.getDenseI64ArrayAttr(map.box)),
         builder.getNamedAttr("swizzle",
                              builder.getI64IntegerAttr(map.swizzleBytes))});
  }

  DenseMap<Value, unsigned> bufferOf;
  llvm::StringMap<unsigned> nameUses;
  std::vector<Launch> launches;
  std::vector<Buffer> buffers;
  std::vector<TensorMap> maps;
  SmallVector<unsigned> zeroed;
  unsigned kernelCount = 0;
};

/// Warp-level helpers on top of LoopBuilder.
struct WarpBuilder : LoopBuilder {
  Value lane;    // index
  Value laneI32; // i32

  Value shuffleXor(Value value, int64_t offset) {
    return gpu::ShuffleOp::create(b, value, static_cast<int32_t>(offset),
                                  static_cast<int32_t>(kWarpSize),
                                  gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }
  Value shuffleFrom(Value value, Value sourceLane) {
    return gpu::ShuffleOp::create(
               b, value, sourceLane, i32(kWarpSize),
               gpu::ShuffleModeAttr::get(b.getContext(), gpu::ShuffleMode::IDX))
        .getShuffleResult();
  }
  /// `combine` over the warp with a butterfly (offsets 1, 2, 4, 8, 16): lane
  /// groups combine in index order, so an fp sum is the pairwise sum that
  /// kSoftmaxSumLanes defines, identical in every lane.
  Value allReduce(Value value, function_ref<Value(Value, Value)> combine) {
    for (int64_t offset = 1; offset < kWarpSize; offset *= 2)
      value = combine(value, shuffleXor(value, offset));
    return value;
  }
  /// The order-preserving 32-bit image of an f32 score, compared unsigned:
  /// larger scores give larger keys, NaN gives 0 (below every number), and
  /// -0 and +0 give one key, as they tie in the op's order.
  Value orderedKey(Value value) {
    Value canonical = arith::AddFOp::create(b, value, f32(0.0)); // -0 -> +0
    Value bits = arith::BitcastOp::create(b, b.getI32Type(), canonical);
    Value positive = cmpi(arith::CmpIPredicate::sge, bits, i32(0));
    Value ordered =
        select(positive, arith::XOrIOp::create(b, bits, i32(INT32_MIN)),
               arith::XOrIOp::create(b, bits, i32(-1)));
    return select(isNaN(value), i32(0), ordered);
  }
  /// The score of a key (NaN for 0).
  Value scoreOfKey(Value key) {
    Value wasPositive = cmpi(arith::CmpIPredicate::slt, key, i32(0));
    Value bits =
        select(wasPositive, arith::XOrIOp::create(b, key, i32(INT32_MIN)),
               arith::XOrIOp::create(b, key, i32(-1)));
    return arith::BitcastOp::create(b, b.getF32Type(), bits);
  }

  /// An expert in the running for selection: its key and id. "None" is
  /// (0, INT32_MAX), below every candidate, NaN ones included.
  struct Candidate {
    Value key, expert;
  };
  Candidate none() { return {i32(0), i32(INT32_MAX)}; }
  /// The better of two candidates: the larger key, then the lower expert.
  Candidate better(Candidate a, Candidate c) {
    Value larger = cmpi(arith::CmpIPredicate::ugt, c.key, a.key);
    Value tieLower = arith::AndIOp::create(
        b, cmpi(arith::CmpIPredicate::eq, c.key, a.key),
        cmpi(arith::CmpIPredicate::slt, c.expert, a.expert));
    Value take = arith::OrIOp::create(b, larger, tieLower);
    return {select(take, c.key, a.key), select(take, c.expert, a.expert)};
  }
  /// redux.sync `kind` of the i32 `value` over the full warp (sm_80+): one
  /// instruction where a butterfly takes five shuffles.
  Value redux(NVVM::ReduxKind kind, Value value) {
    return NVVM::ReduxOp::create(b, b.getI32Type(), value,
                                 NVVM::ReduxKindAttr::get(b.getContext(), kind),
                                 i32(-1));
  }
  /// The best candidate of the warp, in every lane: the largest key, then
  /// among its holders the lowest expert.
  Candidate warpBest(Candidate candidate) {
    Value key = redux(NVVM::ReduxKind::UMAX, candidate.key);
    Value holds = cmpi(arith::CmpIPredicate::eq, candidate.key, key);
    Value expert = redux(NVVM::ReduxKind::UMIN,
                         select(holds, candidate.expert, i32(INT32_MAX)));
    return {key, expert};
  }
  /// The two largest keys of the warp (as a multiset), from each lane's two
  /// largest (`first` >= `second`, unsigned).
  std::pair<Value, Value> warpTopTwo(Value first, Value second) {
    Value top = redux(NVVM::ReduxKind::UMAX, first);
    Value holds = cmpi(arith::CmpIPredicate::eq, first, top);
    // One holder of the top gives up its first for its second; a second
    // holder makes the runner-up equal to the top.
    Value holders = redux(NVVM::ReduxKind::ADD, select(holds, i32(1), i32(0)));
    Value runnerUp = redux(NVVM::ReduxKind::UMAX, select(holds, second, first));
    return {top, select(cmpi(arith::CmpIPredicate::uge, holders, i32(2)), top,
                        runnerUp)};
  }
};

/// The i32 token count, the kernel's last argument (workgroup attributions
/// follow the arguments among the entry block's values).
Value tokenCount(gpu::GPUFuncOp kernel) {
  return kernel.getArgument(kernel.getFunctionType().getNumInputs() - 1);
}

WarpBuilder makeWarpBuilder(ImplicitLocOpBuilder &b) {
  WarpBuilder wb{{b}, Value(), Value()};
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  wb.lane = arith::RemUIOp::create(b, tid, wb.index(kWarpSize));
  wb.laneI32 = wb.toI32(wb.lane);
  return wb;
}

//===----------------------------------------------------------------------===//
// moe.gate
//===----------------------------------------------------------------------===//

constexpr int64_t kGateWarpsPerBlock = 4;
constexpr int64_t kMaxExpertsPerLane = 32;

/// One warp per token: scores, grouped top-k and the weights of moe.gate.
LogicalResult emitGate(PlanBuilder &plan, OpBuilder &builder, GateOp op) {
  OpBuilder::InsertionGuard guard(builder);
  RouterAttr router = op.getRouter();
  auto logitsType = cast<RankedTensorType>(op.getLogits().getType());
  int64_t numExperts = logitsType.getDimSize(1);
  int64_t numGroups = router.getNumGroups(), topK = router.getTopK();
  int64_t groupSize = numExperts / numGroups;
  int64_t perLane = llvm::divideCeil(numExperts, kWarpSize);
  // A lane keeps its experts in registers: 32 per lane at most.
  if (perLane > kMaxExpertsPerLane)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kMaxExpertsPerLane * kWarpSize << " experts";
  bool hasBias = static_cast<bool>(op.getCorrectionBias());
  SizeExpr t = plan.tokens();
  int64_t slots = router.getNumSlots();

  SmallVector<KernelArg> args = {plan.use(op.getLogits())};
  if (hasBias)
    args.push_back(plan.use(op.getCorrectionBias()));
  args.push_back(plan.define(op.getWeights(), "gate_weights",
                             {t, PlanBuilder::constant(slots)}));
  args.push_back(
      plan.define(op.getIds(), "gate_ids", {t, PlanBuilder::constant(slots)}));
  gpu::GPUFuncOp kernel =
      plan.createKernel(builder, op.getLoc(), "moe_gate", args,
                        {PlanBuilder::ceilDiv(t, kGateWarpsPerBlock),
                         PlanBuilder::constant(1), PlanBuilder::constant(1)},
                        {kGateWarpsPerBlock * kWarpSize, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value logits = kernel.getArgument(0);
  Value bias = hasBias ? kernel.getArgument(1) : Value();
  Value weights = kernel.getArgument(hasBias ? 2 : 1);
  Value ids = kernel.getArgument(hasBias ? 3 : 2);
  Value numTokens = wb.toIndex(tokenCount(kernel));

  Value warp = arith::DivUIOp::create(
      b, gpu::ThreadIdOp::create(b, gpu::Dimension::x), wb.index(kWarpSize));
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kGateWarpsPerBlock)),
      warp);
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, token, numTokens), [&] {
    Location loc = b.getLoc();
    Value trueValue = arith::ConstantIntOp::create(b, b.getI1Type(), 1);
    // Lane l holds experts l, l + 32, ...
    SmallVector<Value> experts, expertsI32, valid, x;
    for (int64_t j = 0; j < perLane; ++j) {
      Value expert = arith::AddIOp::create(b, wb.lane, wb.index(j * kWarpSize));
      bool allValid = (j + 1) * kWarpSize <= numExperts;
      Value isValid = allValid ? trueValue
                               : wb.cmpi(arith::CmpIPredicate::ult, expert,
                                         wb.index(numExperts));
      Value safe = allValid ? expert : wb.select(isValid, expert, wb.index(0));
      experts.push_back(expert);
      expertsI32.push_back(wb.toI32(expert));
      valid.push_back(isValid);
      x.push_back(wb.loadF32(logits, {token, safe}));
    }

    SmallVector<Value> scores(perLane);
    if (router.getScoring() == Scoring::sigmoid) {
      for (int64_t j = 0; j < perLane; ++j)
        scores[j] = emitRoutingSigmoid(b, loc, x[j]);
    } else {
      Value negInf = wb.f32(-std::numeric_limits<float>::infinity());
      Value max = negInf;
      for (int64_t j = 0; j < perLane; ++j)
        max = arith::MaximumFOp::create(b, max,
                                        wb.select(valid[j], x[j], negInf));
      max = wb.allReduce(max, [&](Value l, Value r) {
        return arith::MaximumFOp::create(b, l, r).getResult();
      });
      Value partial = wb.f32(0.0);
      SmallVector<Value> p(perLane);
      for (int64_t j = 0; j < perLane; ++j) {
        p[j] = wb.select(
            valid[j],
            emitRoutingExp(b, loc, arith::SubFOp::create(b, x[j], max)),
            wb.f32(0.0));
        partial = arith::AddFOp::create(b, partial, p[j]);
      }
      Value sum = wb.allReduce(partial, [&](Value l, Value r) {
        return arith::AddFOp::create(b, l, r).getResult();
      });
      for (int64_t j = 0; j < perLane; ++j)
        scores[j] = arith::DivFOp::create(b, p[j], sum);
    }
    SmallVector<Value> selection(scores);
    if (bias)
      for (int64_t j = 0; j < perLane; ++j)
        selection[j] = arith::AddFOp::create(
            b, scores[j],
            wb.load(bias, wb.select(valid[j], experts[j], wb.index(0))));
    SmallVector<Value> keys;
    for (int64_t j = 0; j < perLane; ++j)
      keys.push_back(wb.orderedKey(selection[j]));
    Value noKey = wb.i32(0);

    SmallVector<Value> eligible(valid);
    if (numGroups > 1) {
      // A group's score: the sum of its two largest selection scores. All
      // groups reduce at once, on keys alone: the multiset top-2 needs no
      // expert ids.
      bool staticGroups = groupSize % kWarpSize == 0;
      SmallVector<Value> groupOf;
      for (int64_t j = 0; j < perLane; ++j)
        groupOf.push_back(
            staticGroups
                ? wb.i32(j * kWarpSize / groupSize)
                : arith::DivUIOp::create(b, expertsI32[j], wb.i32(groupSize))
                      .getResult());
      SmallVector<Value> groupScores;
      for (int64_t g = 0; g < numGroups; ++g) {
        Value first = noKey, second = noKey;
        for (int64_t j = 0; j < perLane; ++j) {
          if (staticGroups && j * kWarpSize / groupSize != g)
            continue;
          Value member = valid[j];
          if (!staticGroups)
            member = arith::AndIOp::create(
                b, member,
                wb.cmpi(arith::CmpIPredicate::eq, groupOf[j], wb.i32(g)));
          Value key = wb.select(member, keys[j], noKey);
          second = arith::MaxUIOp::create(
              b, second, arith::MinUIOp::create(b, first, key));
          first = arith::MaxUIOp::create(b, first, key);
        }
        auto [top, runnerUp] = wb.warpTopTwo(first, second);
        groupScores.push_back(arith::AddFOp::create(b, wb.scoreOfKey(top),
                                                    wb.scoreOfKey(runnerUp)));
      }
      // Keep the topk_groups best groups: warp-uniform, so no shuffles.
      SmallVector<Value> kept(
          numGroups, arith::ConstantIntOp::create(b, b.getI1Type(), 0));
      SmallVector<Value> groupKeys;
      for (Value score : groupScores)
        groupKeys.push_back(wb.orderedKey(score));
      for (int64_t round = 0; round < router.getTopkGroups(); ++round) {
        WarpBuilder::Candidate best = wb.none();
        for (int64_t g = 0; g < numGroups; ++g)
          best = wb.better(best,
                           {wb.select(kept[g], noKey, groupKeys[g]),
                            wb.select(kept[g], wb.i32(INT32_MAX), wb.i32(g))});
        for (int64_t g = 0; g < numGroups; ++g)
          kept[g] = arith::OrIOp::create(
              b, kept[g],
              wb.cmpi(arith::CmpIPredicate::eq, best.expert, wb.i32(g)));
      }
      for (int64_t j = 0; j < perLane; ++j) {
        Value keptGroup = arith::ConstantIntOp::create(b, b.getI1Type(), 0);
        if (staticGroups) {
          keptGroup = kept[j * kWarpSize / groupSize];
        } else {
          for (int64_t g = 0; g < numGroups; ++g)
            keptGroup = wb.select(
                wb.cmpi(arith::CmpIPredicate::eq, groupOf[j], wb.i32(g)),
                kept[g], keptGroup);
        }
        eligible[j] = arith::AndIOp::create(b, valid[j], keptGroup);
      }
    }

    // top_k rounds of arg-max over the remaining candidates; the winner
    // leaves the running, and its unbiased score comes from the lane that
    // holds it (or from its key, when selection and score agree).
    SmallVector<WarpBuilder::Candidate> candidates;
    for (int64_t j = 0; j < perLane; ++j)
      candidates.push_back(
          {wb.select(eligible[j], keys[j], noKey),
           wb.select(eligible[j], expertsI32[j], wb.i32(INT32_MAX))});
    SmallVector<Value> slotIds, slotWeights;
    Value sum = wb.f32(0.0);
    for (int64_t s = 0; s < topK; ++s) {
      // A lane's experts increase with j, so a strictly larger key decides
      // within the lane; warpBest settles ties across lanes.
      WarpBuilder::Candidate best = candidates.front();
      for (const WarpBuilder::Candidate &candidate :
           llvm::drop_begin(candidates)) {
        Value larger =
            wb.cmpi(arith::CmpIPredicate::ugt, candidate.key, best.key);
        best = {wb.select(larger, candidate.key, best.key),
                wb.select(larger, candidate.expert, best.expert)};
      }
      best = wb.warpBest(best);
      Value expert = best.expert;
      Value score = wb.scoreOfKey(best.key);
      if (bias) {
        Value slotInLane = arith::DivUIOp::create(b, expert, wb.i32(kWarpSize));
        Value mine = wb.f32(0.0);
        for (int64_t j = 0; j < perLane; ++j)
          mine = wb.select(
              wb.cmpi(arith::CmpIPredicate::eq, slotInLane, wb.i32(j)),
              scores[j], mine);
        score = wb.shuffleFrom(
            mine, arith::RemUIOp::create(b, expert, wb.i32(kWarpSize)));
      }
      for (WarpBuilder::Candidate &candidate : candidates) {
        Value won = wb.cmpi(arith::CmpIPredicate::eq, candidate.expert, expert);
        candidate = {wb.select(won, noKey, candidate.key),
                     wb.select(won, wb.i32(INT32_MAX), candidate.expert)};
      }
      Value weight = wb.select(wb.isNaN(score), wb.f32(0.0), score);
      sum = arith::AddFOp::create(b, sum, weight);
      slotIds.push_back(expert);
      slotWeights.push_back(weight);
    }
    double scale = router.getRoutedScalingFactor().convertToDouble();
    Value denominator =
        router.getRenormalize()
            ? arith::AddFOp::create(b, sum, wb.f32(1e-20)).getResult()
            : Value();
    for (Value &weight : slotWeights) {
      if (denominator)
        weight = arith::DivFOp::create(b, weight, denominator);
      if (scale != 1.0)
        weight = arith::MulFOp::create(b, weight, wb.f32(scale));
    }
    for (int64_t i = 0; i < router.getNumSharedExperts(); ++i) {
      slotIds.push_back(wb.i32(numExperts + i));
      slotWeights.push_back(wb.f32(1.0));
    }
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)), [&] {
      for (int64_t s = 0; s < slots; ++s) {
        wb.store(slotIds[s], ids, {token, wb.index(s)});
        wb.store(slotWeights[s], weights, {token, wb.index(s)});
      }
    });
  });
  return success();
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

constexpr int64_t kRouteThreads = 512;
constexpr int64_t kRouteWarps = kRouteThreads / kWarpSize;
constexpr int64_t kScanThreads = 1024;

/// The workgroup (shared) memory type of `shape` x `type`.
MemRefType workgroupMemRef(ArrayRef<int64_t> shape, Type type) {
  return MemRefType::get(shape, type, MemRefLayoutAttrInterface(),
                         gpu::AddressSpaceAttr::get(
                             type.getContext(), gpu::AddressSpace::Workgroup));
}

/// Emits `for i = start; i < end; i += step` (index values).
void strided(LoopBuilder &lb, Value start, Value end, int64_t step,
             function_ref<void(Value)> body) {
  auto forOp = scf::ForOp::create(lb.b, start, end, lb.index(step));
  OpBuilder::InsertionGuard guard(lb.b);
  lb.b.setInsertionPointToStart(forOp.getBody());
  body(forOp.getInductionVar());
}

/// Counting sort on the device: histogram, scan, stable placement.
LogicalResult emitRoute(PlanBuilder &plan, OpBuilder &builder, RouteOp op) {
  OpBuilder::InsertionGuard guard(builder);
  int64_t numExperts = op.getNumExperts(), blockM = op.getBlockM();
  int64_t slots = cast<RankedTensorType>(op.getIds().getType()).getDimSize(1);
  if (numExperts > kScanThreads)
    return op.emitOpError() << "has no GPU lowering for more than "
                            << kScanThreads << " experts";
  Location loc = op.getLoc();
  Type i32 = builder.getI32Type();
  SizeExpr routed = plan.affine(slots, 0);
  SizeExpr capacity = plan.affine(slots, numExperts * (blockM - 1));
  SizeExpr chunks = PlanBuilder::ceilDiv(routed, kRouteThreads);
  SizeExpr experts = PlanBuilder::constant(numExperts);

  unsigned ids = plan.use(op.getIds());
  unsigned sortedIds =
      plan.define(op.getSortedIds(), "route_sorted_ids", {capacity});
  unsigned expertIds = plan.define(op.getExpertIds(), "route_expert_ids",
                                   {PlanBuilder::ceilDiv(capacity, blockM)});
  unsigned numPadded = plan.define(op.getNumPadded(), "route_num_padded", {});
  unsigned blockOffsets =
      plan.scratch("route_block_offsets", i32, {chunks, experts});
  unsigned expertOffsets = plan.scratch("route_expert_offsets", i32, {experts});

  // Slot `slot` of the chunk, its expert, and whether that is in range.
  auto loadSlot = [&](WarpBuilder &wb, Value idsBuffer,
                      Value numTokens) -> std::tuple<Value, Value, Value> {
    ImplicitLocOpBuilder &b = wb.b;
    Value slot = arith::AddIOp::create(
        b,
        arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                              wb.index(kRouteThreads)),
        gpu::ThreadIdOp::create(b, gpu::Dimension::x));
    Value inRange =
        wb.cmpi(arith::CmpIPredicate::ult, slot,
                arith::MulIOp::create(b, numTokens, wb.index(slots)));
    Value safe = wb.select(inRange, slot, wb.index(0));
    Value expert =
        wb.load(idsBuffer, {arith::DivUIOp::create(b, safe, wb.index(slots)),
                            arith::RemUIOp::create(b, safe, wb.index(slots))});
    Value valid = arith::AndIOp::create(
        b, inRange, wb.inRange(expert, wb.i32(0), wb.i32(numExperts)));
    return {slot, wb.select(valid, expert, wb.i32(-1)), valid};
  };

  // 1. Per-chunk histograms.
  {
    gpu::GPUFuncOp kernel = plan.createKernel(
        builder, loc, "moe_route_count", {ids, blockOffsets},
        {chunks, PlanBuilder::constant(1), PlanBuilder::constant(1)},
        {kRouteThreads, 1, 1}, {workgroupMemRef({numExperts}, i32)});
    ImplicitLocOpBuilder b(loc, builder);
    WarpBuilder wb = makeWarpBuilder(b);
    Value counts = kernel.getWorkgroupAttributions()[0];
    Value numTokens = wb.toIndex(tokenCount(kernel));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    strided(wb, tid, wb.index(numExperts), kRouteThreads,
            [&](Value e) { wb.store(wb.i32(0), counts, e); });
    gpu::BarrierOp::create(b);
    Value slot, expert, valid;
    std::tie(slot, expert, valid) =
        loadSlot(wb, kernel.getArgument(0), numTokens);
    wb.ifThen(valid, [&] {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, wb.i32(1),
                                  counts, ValueRange{wb.toIndex(expert)});
    });
    gpu::BarrierOp::create(b);
    Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    strided(wb, tid, wb.index(numExperts), kRouteThreads, [&](Value e) {
      wb.store(wb.load(counts, e), kernel.getArgument(1), {chunk, e});
    });
  }

  // 2. One block: stable per-chunk offsets, padded expert offsets, block
  // experts, padding sentinels and the padded count.
  {
    gpu::GPUFuncOp kernel = plan.createKernel(
        builder, loc, "moe_route_scan",
        {blockOffsets, expertOffsets, sortedIds, expertIds, numPadded},
        {PlanBuilder::constant(1), PlanBuilder::constant(1),
         PlanBuilder::constant(1)},
        {kScanThreads, 1, 1}, {workgroupMemRef({kScanThreads}, i32)});
    ImplicitLocOpBuilder b(loc, builder);
    WarpBuilder wb = makeWarpBuilder(b);
    Value scan = kernel.getWorkgroupAttributions()[0];
    Value offsetsPerChunk = kernel.getArgument(0);
    Value numTokens = wb.toIndex(tokenCount(kernel));
    Value routedSlots = arith::MulIOp::create(b, numTokens, wb.index(slots));
    Value sentinel = wb.toI32(routedSlots);
    Value numChunks =
        arith::CeilDivUIOp::create(b, routedSlots, wb.index(kRouteThreads));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value isExpert =
        wb.cmpi(arith::CmpIPredicate::ult, tid, wb.index(numExperts));
    Value expert = wb.select(isExpert, tid, wb.index(0));
    // Exclusive prefix over chunks, in chunk order: slots keep their order.
    Value total = wb.loop(
        wb.index(0), wb.select(isExpert, numChunks, wb.index(0)), {wb.i32(0)},
        [&](Value chunk, ValueRange carried) -> SmallVector<Value> {
          Value count = wb.load(offsetsPerChunk, {chunk, expert});
          wb.store(carried[0], offsetsPerChunk, {chunk, expert});
          return {arith::AddIOp::create(b, carried[0], count)};
        })[0];
    Value blockRows = wb.i32(blockM);
    Value padded = arith::MulIOp::create(
        b, arith::CeilDivUIOp::create(b, total, blockRows), blockRows);
    // Inclusive scan of the padded counts over the block (Hillis-Steele).
    wb.store(padded, scan, tid);
    gpu::BarrierOp::create(b);
    for (int64_t distance = 1; distance < kScanThreads; distance *= 2) {
      Value hasLeft =
          wb.cmpi(arith::CmpIPredicate::uge, tid, wb.index(distance));
      Value left = wb.load(
          scan,
          wb.select(hasLeft, arith::SubIOp::create(b, tid, wb.index(distance)),
                    wb.index(0)));
      left = wb.select(hasLeft, left, wb.i32(0));
      gpu::BarrierOp::create(b);
      wb.store(arith::AddIOp::create(b, wb.load(scan, tid), left), scan, tid);
      gpu::BarrierOp::create(b);
    }
    Value offset = arith::SubIOp::create(b, wb.load(scan, tid), padded);
    Value totalPadded = wb.load(scan, wb.index(kScanThreads - 1));
    Value sortedBuffer = kernel.getArgument(2),
          expertBuffer = kernel.getArgument(3);
    wb.ifThen(isExpert, [&] {
      wb.store(offset, kernel.getArgument(1), expert);
      Value firstBlock = arith::DivUIOp::create(b, offset, blockRows);
      Value endBlock = arith::DivUIOp::create(
          b, arith::AddIOp::create(b, offset, padded), blockRows);
      wb.loop(wb.toIndex(firstBlock), wb.toIndex(endBlock), [&](Value block) {
        wb.store(wb.toI32(expert), expertBuffer, block);
      });
      wb.loop(wb.toIndex(arith::AddIOp::create(b, offset, total)),
              wb.toIndex(arith::AddIOp::create(b, offset, padded)),
              [&](Value row) { wb.store(sentinel, sortedBuffer, row); });
    });
    wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, tid, wb.index(0)),
              [&] { wb.store(totalPadded, kernel.getArgument(4), {}); });
    Value rowCapacity = arith::AddIOp::create(
        b, routedSlots, wb.index(numExperts * (blockM - 1)));
    strided(wb, arith::AddIOp::create(b, wb.toIndex(totalPadded), tid),
            rowCapacity, kScanThreads,
            [&](Value row) { wb.store(sentinel, sortedBuffer, row); });
    strided(wb,
            arith::AddIOp::create(
                b,
                wb.toIndex(arith::DivUIOp::create(b, totalPadded, blockRows)),
                tid),
            arith::CeilDivUIOp::create(b, rowCapacity, wb.index(blockM)),
            kScanThreads,
            [&](Value block) { wb.store(wb.i32(-1), expertBuffer, block); });
  }

  // 3. Stable placement: rank within the warp by match.any, across warps
  // through shared per-warp counts, across chunks by the scanned offsets.
  {
    gpu::GPUFuncOp kernel = plan.createKernel(
        builder, loc, "moe_route_place",
        {ids, blockOffsets, expertOffsets, sortedIds},
        {chunks, PlanBuilder::constant(1), PlanBuilder::constant(1)},
        {kRouteThreads, 1, 1},
        {workgroupMemRef({kRouteWarps, numExperts}, i32)});
    ImplicitLocOpBuilder b(loc, builder);
    WarpBuilder wb = makeWarpBuilder(b);
    Value warpCounts = kernel.getWorkgroupAttributions()[0];
    Value numTokens = wb.toIndex(tokenCount(kernel));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value warp = arith::DivUIOp::create(b, tid, wb.index(kWarpSize));
    Value chunk = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    strided(wb, tid, wb.index(kRouteWarps * numExperts), kRouteThreads,
            [&](Value i) {
              wb.store(wb.i32(0), warpCounts,
                       {arith::DivUIOp::create(b, i, wb.index(numExperts)),
                        arith::RemUIOp::create(b, i, wb.index(numExperts))});
            });
    gpu::BarrierOp::create(b);
    Value slot, expert, valid;
    std::tie(slot, expert, valid) =
        loadSlot(wb, kernel.getArgument(0), numTokens);
    Value same = NVVM::MatchSyncOp::create(
        b, i32, wb.i32(-1), expert,
        NVVM::MatchSyncKindAttr::get(b.getContext(), NVVM::MatchSyncKind::any));
    Value below =
        arith::AndIOp::create(b, same, NVVM::LaneMaskLtOp::create(b, i32));
    Value rank = LLVM::CtPopOp::create(b, below);
    Value leader = wb.cmpi(arith::CmpIPredicate::eq, below, wb.i32(0));
    wb.ifThen(arith::AndIOp::create(b, valid, leader), [&] {
      wb.store(LLVM::CtPopOp::create(b, same), warpCounts,
               {warp, wb.toIndex(expert)});
    });
    gpu::BarrierOp::create(b);
    strided(wb, tid, wb.index(numExperts), kRouteThreads, [&](Value e) {
      Value start =
          arith::AddIOp::create(b, wb.load(kernel.getArgument(2), e),
                                wb.load(kernel.getArgument(1), {chunk, e}));
      wb.loop(wb.index(0), wb.index(kRouteWarps), {start},
              [&](Value w, ValueRange carried) -> SmallVector<Value> {
                Value count = wb.load(warpCounts, {w, e});
                wb.store(carried[0], warpCounts, {w, e});
                return {arith::AddIOp::create(b, carried[0], count)};
              });
    });
    gpu::BarrierOp::create(b);
    wb.ifThen(valid, [&] {
      Value row = arith::AddIOp::create(
          b, wb.load(warpCounts, {warp, wb.toIndex(expert)}), rank);
      wb.store(wb.toI32(slot), kernel.getArgument(3), wb.toIndex(row));
    });
  }
  return success();
}

//===----------------------------------------------------------------------===//
// moe.grouped_matmul
//===----------------------------------------------------------------------===//

constexpr int64_t kGemmThreadsPerSide = 16;
/// The integer memory space of shared memory, as the nvgpu TMA and mbarrier
/// types take it.
constexpr int64_t kSharedAddressSpace = 3;
/// A suspend-time hint of the mbarrier waits (ns); they retry until done.
constexpr int64_t kMbarrierWaitTicks = 1000000;

/// The base of the dynamic shared memory of the kernels of `kernels`: one
/// public, uninitialised, 1024-byte aligned `memref.global` that every view
/// is taken from (private zero-sized globals would each become a separate
/// unaligned `.shared` variable).
Value dynamicSharedMemory(ImplicitLocOpBuilder &b, gpu::GPUModuleOp kernels) {
  constexpr llvm::StringLiteral kName = "moe_dynamic_shared_memory";
  auto type = MemRefType::get({0}, b.getI8Type(), MemRefLayoutAttrInterface(),
                              b.getI64IntegerAttr(kSharedAddressSpace));
  if (!SymbolTable::lookupSymbolIn(kernels, kName)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(kernels.getBody());
    memref::GlobalOp::create(b, kName, b.getStringAttr("public"), type,
                             Attribute(), /*constant=*/false,
                             b.getI64IntegerAttr(1024));
  }
  return memref::GetGlobalOp::create(b, type, kName);
}
constexpr int64_t kGemmTileN = 64, kGemmTileK = 16;
constexpr int64_t kGemmColumnsPerThread = kGemmTileN / kGemmThreadsPerSide;

/// A shared-memory tiled SIMT kernel: one block per (block_m rows of one
/// expert) x 64 columns, fp32 accumulation over K in order, the epilogue on
/// the accumulators. The correct baseline the tensor-core path is measured
/// against; gathered and sorted rows, padding rows skipped, both output
/// orders.
LogicalResult emitGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
                                GroupedMatmulOp op) {
  OpBuilder::InsertionGuard guard(builder);
  RankedTensorType weightsType = op.getWeightsType();
  int64_t numExperts = op.getNumStoredExperts(), k = op.getReductionSize();
  int64_t slots = op.getNumSlots(), blockM = op.getBlockM();
  Activation activation = op.getActivation();
  bool gated = op.isGated();
  int64_t columns = op.getOutputColumns();
  bool tokenInput = op.getInputOrder() == RowOrder::token;
  bool slotOutput = op.getOutputOrder() == RowOrder::slot;
  bool weighted = static_cast<bool>(op.getRoutedWeights());
  if (blockM % kGemmThreadsPerSide != 0 || blockM > 128)
    return op.emitOpError() << "has no GPU lowering for block_m " << blockM
                            << " (a multiple of 16 up to 128)";
  int64_t rowsPerThread = blockM / kGemmThreadsPerSide;
  int64_t threads = kGemmThreadsPerSide * kGemmThreadsPerSide;

  SizeExpr capacity = plan.affine(slots, numExperts * (blockM - 1));
  unsigned sortedIds = plan.use(op.getSortedIds());
  unsigned expertIds = plan.use(op.getExpertIds());
  unsigned rows = plan.use(op.getInput());
  plan.refineInput(sortedIds, {capacity});
  plan.refineInput(expertIds, {PlanBuilder::ceilDiv(capacity, blockM)});
  if (!tokenInput)
    plan.refineInput(rows, {capacity, PlanBuilder::constant(k)});
  // Weight tiles come through one 3-D TMA descriptor over [E, N, K], the
  // expert its outer coordinate, built once by the runtime and passed by
  // value, when the rows are the 16-byte multiples TMA needs; else the
  // threads load them. Sorted input rows are contiguous, so their tiles come
  // through a 2-D descriptor over [C, K] as well; gathered token rows are
  // loaded by the threads.
  int64_t elementBytes = weightsType.getElementTypeBitWidth() / 8;
  bool weightsByTma = (k * elementBytes) % 16 == 0;
  bool rowsByTma = weightsByTma && !tokenInput;
  unsigned weightsBuffer = plan.use(op.getWeights());
  KernelArg weightsArg =
      weightsByTma
          ? KernelArg::tensorMap(plan.tensorMap(weightsBuffer, "weight_map",
                                                {kGemmTileK, kGemmTileN, 1},
                                                /*swizzleBytes=*/0))
          : KernelArg(weightsBuffer);
  KernelArg rowsArg = rowsByTma ? KernelArg::tensorMap(plan.tensorMap(
                                      rows, "input_map", {kGemmTileK, blockM},
                                      /*swizzleBytes=*/0))
                                : KernelArg(rows);
  int64_t weightTileBytes = kGemmTileN * kGemmTileK * elementBytes;
  int64_t numWeightTiles = gated ? 2 : 1;
  int64_t rowTileBytes = blockM * kGemmTileK * elementBytes;
  // The bytes TMA brings in per K step, into the dynamic shared memory.
  int64_t tmaStepBytes = (weightsByTma ? numWeightTiles * weightTileBytes : 0) +
                         (rowsByTma ? rowTileBytes : 0);
  SmallVector<KernelArg> args = {rowsArg, weightsArg, sortedIds, expertIds,
                                 plan.use(op.getNumPadded())};
  if (weighted)
    args.push_back(plan.use(op.getRoutedWeights()));
  SmallVector<SizeExpr> outputDims =
      slotOutput
          ? SmallVector<SizeExpr>{plan.tokens(), PlanBuilder::constant(slots),
                                  PlanBuilder::constant(columns)}
          : SmallVector<SizeExpr>{capacity, PlanBuilder::constant(columns)};
  args.push_back(plan.define(op.getOutput(), "gemm_output", outputDims));
  Type f32 = builder.getF32Type();
  SmallVector<MemRefType> shared = {
      workgroupMemRef({blockM, kGemmTileK + 1}, f32),
      workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32)};
  if (gated)
    shared.push_back(workgroupMemRef({kGemmTileN, kGemmTileK + 1}, f32));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_grouped_matmul", args,
      {PlanBuilder::constant(llvm::divideCeil(columns, kGemmTileN)),
       PlanBuilder::ceilDiv(capacity, blockM), PlanBuilder::constant(1)},
      {threads, 1, 1}, shared, tmaStepBytes);

  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value input = kernel.getArgument(0), weights = kernel.getArgument(1);
  // The TMA destinations are views of the dynamic shared memory, shaped as
  // their descriptor's box: the weight tiles (gate, then up) [1, 64, 16],
  // then the row tile [block_m, 16].
  Value sharedBase =
      tmaStepBytes ? dynamicSharedMemory(b, plan.kernels) : Value();
  int64_t sharedOffset = 0;
  auto tmaTile = [&](ArrayRef<int64_t> box) {
    auto type = MemRefType::get(box, weightsType.getElementType(),
                                MemRefLayoutAttrInterface(),
                                b.getI64IntegerAttr(kSharedAddressSpace));
    Value view = memref::ViewOp::create(b, type, sharedBase,
                                        wb.index(sharedOffset), ValueRange());
    sharedOffset += type.getNumElements() * elementBytes;
    return view;
  };
  // The descriptor behind kernel argument `pointer`, for tiles like `tile`.
  auto descriptor = [&](Value pointer, Value tile) -> Value {
    auto type = nvgpu::TensorMapDescriptorType::get(
        b.getContext(), cast<MemRefType>(tile.getType()),
        nvgpu::TensorMapSwizzleKind::SWIZZLE_NONE,
        nvgpu::TensorMapL2PromoKind::L2PROMO_NONE,
        nvgpu::TensorMapOOBKind::OOB_ZERO,
        nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
    return UnrealizedConversionCastOp::create(b, type, pointer).getResult(0);
  };
  SmallVector<Value> weightTiles;
  Value weightMap, rowTile, rowMap;
  if (weightsByTma) {
    for (int64_t tile = 0; tile < numWeightTiles; ++tile)
      weightTiles.push_back(tmaTile({1, kGemmTileN, kGemmTileK}));
    weightMap = descriptor(weights, weightTiles.front());
  }
  if (rowsByTma) {
    rowTile = tmaTile({blockM, kGemmTileK});
    rowMap = descriptor(input, rowTile);
  }
  Value sorted = kernel.getArgument(2), experts = kernel.getArgument(3);
  Value padded = kernel.getArgument(4);
  Value routedWeights = weighted ? Value(kernel.getArgument(5)) : Value();
  Value output = kernel.getArgument(weighted ? 6 : 5);
  auto attributions = kernel.getWorkgroupAttributions();
  Value tileA = attributions[0], tileB = attributions[1];
  Value tileUp = gated ? Value(attributions[2]) : Value();
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value routedSlots = arith::MulIOp::create(b, numTokens, wb.index(slots));

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value tx = arith::RemUIOp::create(b, tid, wb.index(kGemmThreadsPerSide));
  Value ty = arith::DivUIOp::create(b, tid, wb.index(kGemmThreadsPerSide));
  Value rowBlock = gpu::BlockIdOp::create(b, gpu::Dimension::y);
  Value firstColumn = arith::MulIOp::create(
      b, gpu::BlockIdOp::create(b, gpu::Dimension::x), wb.index(kGemmTileN));
  Value firstRow = arith::MulIOp::create(b, rowBlock, wb.index(blockM));
  Value expert = wb.toIndex(wb.load(experts, rowBlock));
  // Blocks past the padded rows, or of no expert, have nothing to do; the
  // condition is uniform over the block, so its barriers stay matched.
  Value active = arith::AndIOp::create(
      b,
      wb.cmpi(arith::CmpIPredicate::ult, firstRow,
              wb.toIndex(wb.load(padded, {}))),
      wb.inRange(expert, wb.index(0), wb.index(numExperts)));
  // The slot of sorted row `row`, and whether it is a routed slot.
  auto slotOf = [&](Value row) -> std::pair<Value, Value> {
    Value slot = wb.toIndex(wb.load(sorted, row));
    return {slot, wb.inRange(slot, wb.index(0), routedSlots)};
  };
  wb.ifThen(active, [&] {
    Value zero = wb.f32(0.0);
    Value leader = wb.cmpi(arith::CmpIPredicate::eq, tid, wb.index(0));
    // One mbarrier counts the weight tiles' bytes of each K step in; its
    // phase flips every step. Initialised by one thread before anyone uses
    // it.
    Value barrier;
    if (weightsByTma) {
      barrier = nvgpu::MBarrierCreateOp::create(
          b, nvgpu::MBarrierGroupType::get(
                 b.getContext(), b.getI64IntegerAttr(kSharedAddressSpace)));
      wb.ifThen(leader, [&] {
        nvgpu::TmaPrefetchOp::create(b, weightMap, Value());
        nvgpu::MBarrierInitOp::create(b, barrier, wb.index(1), wb.index(0),
                                      Value());
      });
      gpu::BarrierOp::create(b);
    }
    int64_t accumulators = rowsPerThread * kGemmColumnsPerThread;
    SmallVector<Value> inits(gated ? 2 * accumulators : accumulators, zero);
    SmallVector<Value> sums = wb.loop(
        wb.index(0), wb.index(k), inits,
        [&](Value k0, ValueRange carried) -> SmallVector<Value> {
          // The weight tiles of this step (gate, then up at column +
          // columns) and the sorted row tile are in flight while the threads
          // stage gathered A rows; TMA fills what lies past N, K or C with
          // zeros.
          if (weightsByTma)
            wb.ifThen(leader, [&] {
              nvgpu::MBarrierArriveExpectTxOp::create(
                  b, barrier, wb.index(tmaStepBytes), wb.index(0), Value());
              for (int64_t tile = 0; tile < numWeightTiles; ++tile)
                nvgpu::TmaAsyncLoadOp::create(
                    b, weightTiles[tile], barrier, weightMap,
                    ValueRange{k0,
                               arith::AddIOp::create(b, firstColumn,
                                                     wb.index(tile * columns)),
                               expert},
                    wb.index(0), Value(), Value());
              if (rowsByTma)
                nvgpu::TmaAsyncLoadOp::create(b, rowTile, barrier, rowMap,
                                              ValueRange{k0, firstRow},
                                              wb.index(0), Value(), Value());
            });
          auto waitForTma = [&] {
            Value step = arith::DivUIOp::create(b, k0, wb.index(kGemmTileK));
            Value parity = arith::IndexCastOp::create(
                b, b.getI1Type(), arith::RemUIOp::create(b, step, wb.index(2)));
            nvgpu::MBarrierTryWaitParityOp::create(
                b, barrier, parity, wb.index(kMbarrierWaitTicks), wb.index(0));
          };
          if (rowsByTma)
            waitForTma();
          // Stage the A rows (gathered, zero for padding rows, which TMA
          // loads as whatever they hold) and the B columns of this K step in
          // shared memory, as f32.
          for (int64_t base = 0; base < blockM * kGemmTileK; base += threads) {
            Value item = arith::AddIOp::create(b, tid, wb.index(base));
            Value i = arith::DivUIOp::create(b, item, wb.index(kGemmTileK));
            Value kk = arith::RemUIOp::create(b, item, wb.index(kGemmTileK));
            Value kIndex = arith::AddIOp::create(b, k0, kk);
            auto [slot, routed] = slotOf(arith::AddIOp::create(b, firstRow, i));
            Value source =
                tokenInput ? arith::DivUIOp::create(b, slot, wb.index(slots))
                                 .getResult()
                           : arith::AddIOp::create(b, firstRow, i).getResult();
            Value valid = arith::AndIOp::create(
                b, routed,
                wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k)));
            Value value =
                rowsByTma ? wb.loadF32(rowTile, {i, kk})
                          : wb.loadF32(input,
                                       {wb.select(valid, source, wb.index(0)),
                                        wb.select(valid, kIndex, wb.index(0))});
            wb.store(wb.select(valid, value, zero), tileA, {i, kk});
          }
          if (weightsByTma && !rowsByTma)
            waitForTma();
          for (int64_t base = 0; base < kGemmTileN * kGemmTileK;
               base += threads) {
            Value item = arith::AddIOp::create(b, tid, wb.index(base));
            Value jj = arith::DivUIOp::create(b, item, wb.index(kGemmTileK));
            Value kk = arith::RemUIOp::create(b, item, wb.index(kGemmTileK));
            Value column = arith::AddIOp::create(b, firstColumn, jj);
            Value kIndex = arith::AddIOp::create(b, k0, kk);
            Value valid = arith::AndIOp::create(
                b,
                wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
                wb.cmpi(arith::CmpIPredicate::ult, kIndex, wb.index(k)));
            Value safeColumn = wb.select(valid, column, wb.index(0));
            Value safeK = wb.select(valid, kIndex, wb.index(0));
            // Weight (expert, column + tile * columns, k) of the step.
            auto weight = [&](int64_t tile) {
              if (weightsByTma)
                return wb.loadF32(weightTiles[tile], {wb.index(0), jj, kk});
              return wb.loadF32(
                  weights, {expert,
                            arith::AddIOp::create(b, safeColumn,
                                                  wb.index(tile * columns)),
                            safeK});
            };
            wb.store(wb.select(valid, weight(0), zero), tileB, {jj, kk});
            if (gated)
              wb.store(wb.select(valid, weight(1), zero), tileUp, {jj, kk});
          }
          gpu::BarrierOp::create(b);
          SmallVector<Value> next(carried.begin(), carried.end());
          for (int64_t kk = 0; kk < kGemmTileK; ++kk) {
            Value kkIndex = wb.index(kk);
            SmallVector<Value> a, bGate, bUp;
            for (int64_t ri = 0; ri < rowsPerThread; ++ri)
              a.push_back(wb.load(
                  tileA,
                  {arith::AddIOp::create(
                       b, arith::MulIOp::create(b, ty, wb.index(rowsPerThread)),
                       wb.index(ri)),
                   kkIndex}));
            for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
              Value jj = arith::AddIOp::create(
                  b,
                  arith::MulIOp::create(b, tx, wb.index(kGemmColumnsPerThread)),
                  wb.index(ci));
              bGate.push_back(wb.load(tileB, {jj, kkIndex}));
              if (gated)
                bUp.push_back(wb.load(tileUp, {jj, kkIndex}));
            }
            // Multiply, then add: no contraction, so the sums round as the
            // CPU loops' do (k ascending).
            for (int64_t ri = 0; ri < rowsPerThread; ++ri)
              for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
                int64_t slot = ri * kGemmColumnsPerThread + ci;
                next[slot] = arith::AddFOp::create(
                    b, next[slot], arith::MulFOp::create(b, a[ri], bGate[ci]));
                if (gated)
                  next[accumulators + slot] = arith::AddFOp::create(
                      b, next[accumulators + slot],
                      arith::MulFOp::create(b, a[ri], bUp[ci]));
              }
          }
          gpu::BarrierOp::create(b);
          return next;
        },
        kGemmTileK);

    for (int64_t ri = 0; ri < rowsPerThread; ++ri) {
      Value row = arith::AddIOp::create(
          b, firstRow,
          arith::AddIOp::create(
              b, arith::MulIOp::create(b, ty, wb.index(rowsPerThread)),
              wb.index(ri)));
      auto [slot, routed] = slotOf(row);
      Value token = arith::DivUIOp::create(b, slot, wb.index(slots));
      Value slotInToken = arith::RemUIOp::create(b, slot, wb.index(slots));
      wb.ifThen(routed, [&] {
        Value weight =
            weighted ? wb.load(routedWeights, {token, slotInToken}) : Value();
        for (int64_t ci = 0; ci < kGemmColumnsPerThread; ++ci) {
          Value column = arith::AddIOp::create(
              b, firstColumn,
              arith::AddIOp::create(
                  b,
                  arith::MulIOp::create(b, tx, wb.index(kGemmColumnsPerThread)),
                  wb.index(ci)));
          int64_t index = ri * kGemmColumnsPerThread + ci;
          wb.ifThen(
              wb.cmpi(arith::CmpIPredicate::ult, column, wb.index(columns)),
              [&] {
                Value value = sums[index];
                if (gated)
                  value = arith::MulFOp::create(
                      b, emitGatedActivation(b, b.getLoc(), activation, value),
                      sums[accumulators + index]);
                if (weight)
                  value = arith::MulFOp::create(b, value, weight);
                if (slotOutput)
                  wb.storeF32(value, output, {token, slotInToken, column});
                else
                  wb.storeF32(value, output, {row, column});
              });
        }
      });
    }
  });
  return success();
}

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

constexpr int64_t kCombineThreads = 256;

/// One thread per 16 bytes of an output row: sum the token's slot rows.
void emitCombine(PlanBuilder &plan, OpBuilder &builder, CombineOp op) {
  OpBuilder::InsertionGuard guard(builder);
  auto rowsType = cast<RankedTensorType>(op.getRows().getType());
  int64_t slots = rowsType.getDimSize(1), hidden = rowsType.getDimSize(2);
  Type elementType = rowsType.getElementType();
  int64_t width = 16 / (elementType.getIntOrFloatBitWidth() / 8);
  while (hidden % width)
    width /= 2;
  int64_t chunksPerRow = hidden / width;
  // Rows start 16-byte aligned (the runtime checks the base) and every chunk
  // is a multiple of its own size into the row, so the vectors are aligned.
  llvm::Align alignment(width * elementType.getIntOrFloatBitWidth() / 8);
  bool weighted = static_cast<bool>(op.getWeights());

  SmallVector<KernelArg> args = {plan.use(op.getRows())};
  if (weighted)
    args.push_back(plan.use(op.getWeights()));
  args.push_back(plan.define(op.getOutput(), "combine_output",
                             {plan.tokens(), PlanBuilder::constant(hidden)}));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_combine", args,
      {PlanBuilder::ceilDiv(plan.affine(chunksPerRow, 0), kCombineThreads),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kCombineThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value rows = kernel.getArgument(0);
  Value weights = weighted ? kernel.getArgument(1) : Value();
  Value output = kernel.getArgument(weighted ? 2 : 1);
  Value numTokens = wb.toIndex(tokenCount(kernel));
  Value item = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kCombineThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value token = arith::DivUIOp::create(b, item, wb.index(chunksPerRow));
  Value column = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, item, wb.index(chunksPerRow)),
      wb.index(width));
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::ult, token, numTokens), [&] {
    auto f32Vector = VectorType::get({width}, b.getF32Type());
    auto rowVector = VectorType::get({width}, elementType);
    Value zero =
        arith::ConstantOp::create(b, DenseElementsAttr::get(f32Vector, 0.0f));
    Value sum = wb.loop(
        wb.index(0), wb.index(slots), {zero},
        [&](Value s, ValueRange carried) -> SmallVector<Value> {
          Value row = vector::LoadOp::create(b, rowVector, rows,
                                             ValueRange{token, s, column},
                                             /*nontemporal=*/false, alignment);
          if (elementType != b.getF32Type())
            row = arith::ExtFOp::create(b, f32Vector, row);
          if (weights)
            row = arith::MulFOp::create(
                b, row,
                vector::BroadcastOp::create(b, f32Vector,
                                            wb.load(weights, {token, s})));
          return {arith::AddFOp::create(b, carried[0], row)};
        })[0];
    if (elementType != b.getF32Type())
      sum = arith::TruncFOp::create(b, rowVector, sum);
    vector::StoreOp::create(b, sum, output, ValueRange{token, column},
                            /*nontemporal=*/false, alignment);
  });
}

struct ConvertMoeToGPUPass
    : moe::impl::ConvertMoeToGPUBase<ConvertMoeToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> functions;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function.isDeclaration())
        functions.push_back(function);
    if (functions.size() != 1) {
      module.emitError() << "convert-moe-to-gpu: expected one layer function, "
                            "got "
                         << functions.size();
      return signalPassFailure();
    }
    if (tokensMax < 1) {
      module.emitError() << "convert-moe-to-gpu: tokens-max must be positive";
      return signalPassFailure();
    }
    func::FuncOp function = functions.front();
    OpBuilder builder(module.getContext());
    builder.setInsertionPointToEnd(module.getBody());
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    builder.getUnitAttr());
    auto target = NVVM::NVVMTargetAttr::get(
        module.getContext(), /*O=*/3, "nvptx64-nvidia-cuda", chip, features);
    auto kernels =
        gpu::GPUModuleOp::create(builder, function.getLoc(), kKernelModuleName,
                                 builder.getArrayAttr({target}));
    PlanBuilder plan(module, kernels, tokensMax);
    for (BlockArgument argument : function.getArguments())
      plan.use(argument);
    WalkResult result = function.walk([&](Operation *op) {
      LogicalResult lowered =
          TypeSwitch<Operation *, LogicalResult>(op)
              .Case([&](GateOp gate) -> LogicalResult {
                return emitGate(plan, builder, gate);
              })
              .Case([&](RouteOp route) -> LogicalResult {
                return emitRoute(plan, builder, route);
              })
              .Case([&](CombineOp combine) -> LogicalResult {
                emitCombine(plan, builder, combine);
                return success();
              })
              .Case([&](GroupedMatmulOp gemm) -> LogicalResult {
                return emitGroupedMatmul(plan, builder, gemm);
              })
              .Case([&](FusedMoeOp fused) -> LogicalResult {
                return fused.emitOpError()
                       << "must be decomposed first (moe-decompose)";
              })
              .Case([&](func::ReturnOp ret) -> LogicalResult {
                plan.markOutputs(ret);
                return success();
              })
              .Default([&](Operation *other) -> LogicalResult {
                if (isa<func::FuncOp>(other))
                  return success();
                return other->emitOpError()
                       << "is not part of a moe layer (convert-moe-to-gpu)";
              });
      return failed(lowered) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    plan.finish(builder);
  }
};

} // namespace
