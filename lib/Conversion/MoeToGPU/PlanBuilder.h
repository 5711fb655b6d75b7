//===- PlanBuilder.h - Kernels and the launch plan of a layer ---*- C++ -*-===//
//
// Shared by the files of convert-moe-to-gpu: the launch plan (buffers, size
// expressions in T, tensor maps, kernels and their launches) that the
// lowering of each op adds its kernels to, and small kernel-building helpers.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_CONVERSION_MOETOGPU_PLANBUILDER_H
#define MOE_LIB_CONVERSION_MOETOGPU_PLANBUILDER_H

#include "moe/Conversion/MoeCommon/LoopBuilder.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/SmallVectorExtras.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir {
namespace moe {
namespace detail {

/// The widest shared-memory access (ld.shared.v4.b32).
constexpr int64_t kSharedVectorBytes = 16;

/// One buffer of the launch plan.
struct Buffer {
  std::string name;
  BufferRole role;
  Type elementType;
  SmallVector<std::string> dims;   // size expressions in T
  SmallVector<int64_t> shapeAtMax; // the sizes at T = tokens-max
  /// A caller tensor that is one rank's slice of an exchange buffer (an
  /// argument marked `moe.exchange`); its dims are the slice's.
  ExpertParallelAttr exchange = {};
  /// A view (a reshape) of this other buffer: the same memory under these
  /// dims, named as that buffer and not declared in the plan.
  std::optional<unsigned> viewOf = {};
};

/// Size expressions in the token count T (docs/BUNDLE.md), with their value
/// at tokens-max. Their products stay far inside int64 (at most a routing
/// capacity times a static size, 2^62) because convert-moe-to-gpu checked
/// tokens-max and the routing at it against MoeLimits.h first.
struct SizeExpr {
  std::string text;
  int64_t atMax;

  /// This expression times `factor`; a sum is parenthesized, so that the
  /// product takes all of it.
  SizeExpr times(int64_t factor) const {
    if (factor == 1)
      return *this;
    std::string factorText = isSum() ? "(" + text + ")" : text;
    return {factorText + "*" + std::to_string(factor), atMax * factor};
  }
  /// Whether the text has a `+` or `-` outside parentheses.
  bool isSum() const {
    int depth = 0;
    for (char c : text) {
      depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      if (depth == 0 && (c == '+' || c == '-'))
        return true;
    }
    return false;
  }
};

/// A TMA descriptor the runtime builds over a buffer, with a box of `box`
/// elements (outermost first).
struct TensorMap {
  std::string name;
  unsigned buffer;
  SmallVector<int64_t> box;
  int64_t swizzleBytes;
};

/// A kernel argument of the plan: a buffer's pointer, a tensor map by value
/// or a buffer's peer table (LaunchArgKind::peers).
struct KernelArg {
  KernelArg(unsigned buffer) : index(buffer), kind(LaunchArgKind::buffer) {}
  static KernelArg tensorMap(unsigned map) {
    KernelArg arg(map);
    arg.kind = LaunchArgKind::map;
    return arg;
  }
  /// The W pointers to the slices of `buffer` (of first dimension W): the
  /// ranks' parts of an expert-parallel exchange buffer.
  static KernelArg peers(unsigned buffer) {
    KernelArg arg(buffer);
    arg.kind = LaunchArgKind::peers;
    return arg;
  }
  unsigned index;
  LaunchArgKind kind;
};

/// The arguments of a kernel being declared. Each is recorded where it is
/// added, and the kernel body reads it by that recorded position, so an
/// optional argument never shifts the others' positions in the code.
class KernelArgList {
public:
  /// Appends `arg`; returns its position.
  unsigned add(KernelArg arg) {
    args.push_back(arg);
    return args.size() - 1;
  }
  /// Appends `arg` when `present` (an optional operand); returns its
  /// position, or none.
  std::optional<unsigned> addIf(bool present,
                                llvm::function_ref<KernelArg()> arg) {
    if (!present)
      return std::nullopt;
    return add(arg());
  }
  ArrayRef<KernelArg> get() const { return args; }

private:
  SmallVector<KernelArg> args;
};

/// The kernel argument at a recorded position, or null for none.
inline Value kernelArgument(gpu::GPUFuncOp kernel,
                            std::optional<unsigned> position) {
  return position ? Value(kernel.getArgument(*position)) : Value();
}

/// Collects buffers and kernels while the ops of a layer are compiled.
class PlanBuilder {
public:
  PlanBuilder(ModuleOp module, gpu::GPUModuleOp kernels, int64_t tokensMax,
              int64_t numSMs)
      : module(module), kernels(kernels), tokensMax(tokensMax), numSMs(numSMs) {
  }

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
  static SizeExpr plus(const SizeExpr &lhs, const SizeExpr &rhs) {
    return {lhs.text + "+" + rhs.text, lhs.atMax + rhs.atMax};
  }
  static SizeExpr min(const SizeExpr &value, int64_t bound) {
    return {"min(" + value.text + "," + std::to_string(bound) + ")",
            std::min(value.atMax, bound)};
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
    buffer.role = BufferRole::workspace;
    if (auto argument = dyn_cast<BlockArgument>(value)) {
      buffer.name = "arg" + std::to_string(argument.getArgNumber());
      buffer.role = BufferRole::input;
    }
    bufferOf[value] = buffers.size();
    buffers.push_back(std::move(buffer));
    return buffers.size() - 1;
  }
  /// Registers a workspace that no tensor of the function holds.
  unsigned scratch(StringRef name, Type elementType, ArrayRef<SizeExpr> dims) {
    Buffer buffer{uniqueName(name), BufferRole::workspace, elementType, {}, {}};
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
    if (buffers[buffer].role != BufferRole::input)
      return;
    buffers[buffer].dims.clear();
    buffers[buffer].shapeAtMax.clear();
    for (const SizeExpr &dim : dims) {
      buffers[buffer].dims.push_back(dim.text);
      buffers[buffer].shapeAtMax.push_back(dim.atMax);
    }
  }

  /// Makes `result`, an op's result that its operand `updated` becomes
  /// after the op's in-place writes, name `updated`'s buffer.
  void alias(Value result, Value updated) { bufferOf[result] = use(updated); }

  /// Makes `result`, a reshape of `source`, a view of `source`'s buffer:
  /// kernels take the same pointer as a memref of `result`'s shape.
  void view(Value result, Value source) {
    unsigned base = use(source);
    while (buffers[base].viewOf)
      base = *buffers[base].viewOf;
    Buffer buffer{
        /*name=*/"", buffers[base].role, buffers[base].elementType, {}, {}};
    for (const SizeExpr &dim : dimsOf(result)) {
      buffer.dims.push_back(dim.text);
      buffer.shapeAtMax.push_back(dim.atMax);
    }
    buffer.viewOf = base;
    bufferOf[result] = buffers.size();
    buffers.push_back(std::move(buffer));
  }

  /// The buffer holding `value`, which an earlier op or the signature
  /// defined with its type's dims (dynamic dims are T); an exchange buffer
  /// argument's are its slice's.
  unsigned use(Value value) {
    auto found = bufferOf.find(value);
    if (found != bufferOf.end())
      return found->second;
    ExpertParallelAttr exchange = exchangeOf(value);
    SmallVector<SizeExpr> dims = dimsOf(value);
    unsigned buffer = define(value, "unnamed",
                             ArrayRef<SizeExpr>(dims).drop_front(!!exchange));
    buffers[buffer].exchange = exchange;
    return buffer;
  }
  /// The buffer of `value`, an exchange buffer argument (or an op's in-place
  /// update of one) that `op` reaches through its peer table (to store into
  /// every rank's slice, or to wait on its own); a diagnostic on `op` when it
  /// is not one.
  FailureOr<unsigned> useExchange(Operation *op, Value value) {
    unsigned buffer = use(value);
    if (exchangeOf(buffer))
      return buffer;
    return op->emitOpError()
           << "reaches every rank's slice of a buffer that is not an "
              "exchange buffer argument (marked 'moe.exchange'), so no caller "
              "binds its ranks' slices (convert-moe-to-gpu)";
  }
  /// The ranks of `buffer` if it is an exchange buffer's slice, else null.
  ExpertParallelAttr exchangeOf(unsigned buffer) const {
    return buffers[buffer].exchange;
  }
  /// Dimension `dim` of buffer `buffer`.
  SizeExpr dimOf(unsigned buffer, unsigned dim) const {
    return {buffers[buffer].dims[dim], buffers[buffer].shapeAtMax[dim]};
  }
  void markOutputs(func::ReturnOp ret) {
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      unsigned returned = use(value);
      Buffer &buffer = buffers[buffers[returned].viewOf.value_or(returned)];
      buffer.name = "result" + std::to_string(index);
      buffer.role = BufferRole::output;
    }
  }
  void zero(unsigned buffer) { zeroed.push_back(buffer); }

  /// Registers the TMA descriptor `op` makes over its source's buffer, to
  /// be encoded once by the runtime.
  void defineTensorMap(TensorMapOp op) {
    TensorMapType type = op.getMapType();
    mapOf[op.getMap()] = maps.size();
    maps.push_back({/*name=*/"", use(op.getSource()),
                    llvm::to_vector(type.getBox()), type.getSwizzle()});
  }
  /// The index for KernelArg::tensorMap of `map`, a moe.tensor_map result.
  unsigned tensorMapOf(Value map) const { return mapOf.at(map); }

  /// Creates kernel `base_<n>` taking `args` (then T as i32), with
  /// `dynamicSharedBytes` of dynamic shared memory, and records its launch,
  /// a dependent one (beginDependentKernel); moves the builder past the
  /// kernel's first ops, where the caller writes its body. A tensor map
  /// argument is an `!llvm.ptr` to the descriptor, listed in the kernel's
  /// `moe.grid_constant_args` so that it is passed by value
  /// (moe-grid-constant-tensor-maps); a peer table is an `!llvm.ptr` to its
  /// array of pointers.
  gpu::GPUFuncOp createKernel(OpBuilder &builder, Location loc, StringRef base,
                              ArrayRef<KernelArg> args, ArrayRef<SizeExpr> grid,
                              ArrayRef<int64_t> block,
                              ArrayRef<MemRefType> workgroup = {},
                              int64_t dynamicSharedBytes = 0) {
    SmallVector<Type> types;
    SmallVector<int64_t> gridConstantArgs;
    for (const KernelArg &arg : args) {
      if (arg.kind == LaunchArgKind::map)
        gridConstantArgs.push_back(types.size());
      if (arg.kind != LaunchArgKind::buffer) {
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
    if (!gridConstantArgs.empty())
      dialect().getGridConstantArgsAttrHelper().setAttr(
          kernel, builder.getDenseI64ArrayAttr(gridConstantArgs));
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
    beginDependentKernel(builder, loc);
    return kernel;
  }

  /// The first ops of every kernel, which the runtime launches as a
  /// programmatic dependent of the kernel before it in the stream (its
  /// `moe.launch` says `dependent`, and the dialect verifies that such a
  /// kernel waits first): each thread waits until the grids before it have
  /// completed and their memory is visible, before any access to global
  /// memory and before any thread may return, so that this grid cannot
  /// complete ahead of them. No kernel triggers its dependents early
  /// (`launch_dependents`): they launch once all its blocks have exited, so
  /// what overlaps is the next kernel's launch with this grid's completion
  /// and memory flush. An early trigger let the next kernel's blocks share
  /// the multiprocessors with this grid's last wave, waiting: Mixtral-8x7B's
  /// second GEMM at T = 1024 took 710 us instead of 493 beside the combine's
  /// waiting blocks (bench/RESULTS.md).
  static void beginDependentKernel(OpBuilder &builder, Location loc) {
    NVVM::GriddepcontrolOp::create(builder, loc, NVVM::GridDepActionKind::wait);
  }

  /// Whether a kernel was added.
  bool hasLaunches() const { return !launches.empty(); }

  /// Records the launch plan: `moe.launch_plan` on the kernel module and
  /// `moe.launch` on each kernel.
  void finish(OpBuilder &builder) {
    MLIRContext *context = builder.getContext();
    SmallVector<PlanBufferAttr> bufferAttrs;
    for (Buffer &buffer : buffers) {
      if (buffer.viewOf) {
        buffer.name = buffers[*buffer.viewOf].name;
        continue;
      }
      auto dims = llvm::map_to_vector(buffer.dims, [&](const std::string &dim) {
        return builder.getStringAttr(dim);
      });
      bufferAttrs.push_back(PlanBufferAttr::get(context, buffer.role,
                                                buffer.name, buffer.elementType,
                                                dims, buffer.exchange));
    }
    SmallVector<StringAttr> zeroFill;
    for (unsigned buffer : zeroed)
      zeroFill.push_back(builder.getStringAttr(buffers[buffer].name));
    // Names are final only now: results are named when the return is seen.
    SmallVector<PlanTensorMapAttr> mapAttrs;
    for (TensorMap &map : maps) {
      map.name = uniqueName(buffers[map.buffer].name + "_map");
      mapAttrs.push_back(PlanTensorMapAttr::get(context, map.name,
                                                buffers[map.buffer].name,
                                                map.box, map.swizzleBytes));
    }
    dialect().getLaunchPlanAttrHelper().setAttr(
        kernels, LaunchPlanAttr::get(context, tokensMax, bufferAttrs, zeroFill,
                                     mapAttrs));
    for (Launch &launch : launches) {
      SmallVector<LaunchArg> args;
      for (const KernelArg &arg : launch.args)
        args.push_back(
            {arg.kind, builder.getStringAttr(arg.kind == LaunchArgKind::map
                                                 ? maps[arg.index].name
                                                 : buffers[arg.index].name)});
      args.push_back(
          {LaunchArgKind::i32, builder.getStringAttr(tokens().text)});
      // createKernel began every kernel with beginDependentKernel.
      dialect().getLaunchAttrHelper().setAttr(
          launch.kernel,
          LaunchAttr::get(context, launch.grid, launch.block,
                          launch.dynamicSharedBytes, args, /*dependent=*/true));
    }
  }

  ModuleOp module;
  gpu::GPUModuleOp kernels;
  int64_t tokensMax;
  /// Multiprocessors of the target GPU: what persistent grids fill.
  int64_t numSMs;

private:
  /// The dims of `value`'s type (dynamic dims are T).
  SmallVector<SizeExpr> dimsOf(Value value) const {
    SmallVector<SizeExpr> dims;
    for (int64_t dim : cast<ShapedType>(value.getType()).getShape())
      dims.push_back(ShapedType::isDynamic(dim) ? tokens() : constant(dim));
    return dims;
  }

  /// The ranks of `value` if it is an argument marked `moe.exchange`.
  ExpertParallelAttr exchangeOf(Value value) {
    auto argument = dyn_cast<BlockArgument>(value);
    auto function =
        argument ? dyn_cast<func::FuncOp>(argument.getOwner()->getParentOp())
                 : func::FuncOp();
    if (!function)
      return {};
    return function.getArgAttrOfType<ExpertParallelAttr>(
        argument.getArgNumber(), dialect().getExchangeAttrHelper().getName());
  }

  /// `base`, or `base_<n>` when a layer has several ops of one kind.
  std::string uniqueName(StringRef base) {
    unsigned uses = nameUses[base]++;
    return uses ? (base + "_" + Twine(uses)).str() : base.str();
  }

  MoeDialect &dialect() {
    return *module.getContext()->getLoadedDialect<MoeDialect>();
  }

  /// A kernel and the buffers it takes, named when the plan is finished.
  struct Launch {
    gpu::GPUFuncOp kernel;
    SmallVector<KernelArg> args;
    SmallVector<StringAttr> grid;
    SmallVector<int64_t> block;
    int64_t dynamicSharedBytes;
  };

  DenseMap<Value, unsigned> bufferOf;
  llvm::StringMap<unsigned> nameUses;
  std::vector<Launch> launches;
  std::vector<Buffer> buffers;
  std::vector<TensorMap> maps;
  DenseMap<Value, unsigned> mapOf;
  SmallVector<unsigned> zeroed;
  unsigned kernelCount = 0;
};

/// The workgroup (shared) memory type of `shape` x `type`.
inline MemRefType workgroupMemRef(ArrayRef<int64_t> shape, Type type) {
  return MemRefType::get(shape, type, MemRefLayoutAttrInterface(),
                         gpu::AddressSpaceAttr::get(
                             type.getContext(), gpu::AddressSpace::Workgroup));
}

/// The i32 token count, the kernel's last argument (workgroup attributions
/// follow the arguments among the entry block's values).
inline Value tokenCount(gpu::GPUFuncOp kernel) {
  return kernel.getArgument(kernel.getFunctionType().getNumInputs() - 1);
}

/// The integer memory space of shared memory, as the nvgpu TMA and mbarrier
/// types take it.
constexpr int64_t kSharedAddressSpace = 3;
/// A suspend-time hint of the mbarrier waits (ns); they retry until done.
constexpr int64_t kMbarrierWaitTicks = 1000000;

/// The base of the dynamic shared memory of the kernels of `kernels`: one
/// public, uninitialised, 1024-byte aligned `memref.global` that every view
/// is taken from (private zero-sized globals would each become a separate
/// unaligned `.shared` variable).
inline Value dynamicSharedMemory(ImplicitLocOpBuilder &b,
                                 gpu::GPUModuleOp kernels) {
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

} // namespace detail
} // namespace moe
} // namespace mlir

#endif // MOE_LIB_CONVERSION_MOETOGPU_PLANBUILDER_H
