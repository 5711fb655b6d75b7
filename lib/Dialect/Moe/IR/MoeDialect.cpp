//===- MoeDialect.cpp - The moe dialect -----------------------------------===//

#include "moe/Dialect/Moe/IR/MoeDialect.h"
#include "moe/Dialect/Moe/IR/MoeAttrs.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/IR/MoeTypes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallBitVector.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/Moe/IR/MoeDialect.cpp.inc"

void MoeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "moe/Dialect/Moe/IR/MoeOps.cpp.inc"
      >();
  registerAttributes();
  registerTypes();
}

//===----------------------------------------------------------------------===//
// The discardable attributes
//===----------------------------------------------------------------------===//

namespace {
/// `op` as a kernel: a gpu.func marked `kernel`, or the llvm.func that
/// convert-gpu-to-nvvm makes of it; null otherwise.
FunctionOpInterface asKernel(Operation *op) {
  if (!op->hasAttr(gpu::GPUDialect::getKernelFuncAttrName()) &&
      !op->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()))
    return {};
  return dyn_cast<FunctionOpInterface>(op);
}

/// Whether `plan` defines what `arg` names (a scalar names nothing).
bool isDefinedBy(LaunchPlanAttr plan, const LaunchArg &arg) {
  switch (arg.kind) {
  case LaunchArgKind::buffer:
  case LaunchArgKind::peers:
    return static_cast<bool>(plan.lookupBuffer(arg.value));
  case LaunchArgKind::map:
    return static_cast<bool>(plan.lookupTensorMap(arg.value));
  case LaunchArgKind::i32:
    return true;
  }
  llvm_unreachable("unknown launch argument kind");
}

/// Whether a kernel argument of `type` can take `arg`: a buffer as a memref
/// of its element type (or a bare pointer once lowered), a tensor map as
/// the pointer to its descriptor, a peer table as the pointer to its array,
/// a scalar as an i32.
bool takes(Type type, const LaunchArg &arg, LaunchPlanAttr plan) {
  switch (arg.kind) {
  case LaunchArgKind::buffer:
    if (auto memref = dyn_cast<MemRefType>(type))
      return memref.getElementType() ==
             plan.lookupBuffer(arg.value).getElementType();
    return isa<LLVM::LLVMPointerType>(type);
  case LaunchArgKind::map:
  case LaunchArgKind::peers:
    return isa<LLVM::LLVMPointerType>(type);
  case LaunchArgKind::i32:
    return type.isSignlessInteger(32);
  }
  llvm_unreachable("unknown launch argument kind");
}

/// Checks that a kernel launched as a programmatic dependent waits for the
/// kernels before it first: its entry block, which every thread runs, has
/// `nvvm.griddepcontrol wait` before any op that touches memory.
LogicalResult verifyDependentKernel(FunctionOpInterface kernel) {
  Region &body = kernel.getFunctionBody();
  if (!body.empty())
    for (Operation &op : body.front()) {
      auto control = dyn_cast<NVVM::GriddepcontrolOp>(op);
      if (control && control.getKind() == NVVM::GridDepActionKind::wait)
        return success();
      if (!isMemoryEffectFree(&op))
        break;
    }
  return kernel.emitOpError()
         << "has a dependent 'moe.launch' but does not begin with "
            "'nvvm.griddepcontrol wait' (before any op that touches memory "
            "in its entry block)";
}

/// Checks that `launch` passes what the kernel takes, from the plan of its
/// module, with the block size the kernel was built for.
LogicalResult verifyLaunch(FunctionOpInterface kernel, LaunchAttr launch) {
  auto module = dyn_cast_or_null<gpu::GPUModuleOp>(kernel->getParentOp());
  auto *dialect = kernel->getContext()->getLoadedDialect<MoeDialect>();
  LaunchPlanAttr plan =
      module ? dialect->getLaunchPlanAttrHelper().getAttr(module) : nullptr;
  if (!plan)
    return kernel.emitOpError()
           << "has a 'moe.launch' but its gpu.module has no 'moe.launch_plan'";
  ArrayRef<Type> types = kernel.getArgumentTypes();
  ArrayRef<LaunchArg> args = launch.getArgs();
  if (args.size() != types.size())
    return kernel.emitOpError()
           << "takes " << types.size()
           << " arguments but its 'moe.launch' passes " << args.size();
  for (auto [index, arg, type] : llvm::enumerate(args, types)) {
    if (!isDefinedBy(plan, arg))
      return kernel.emitOpError()
             << "'moe.launch' argument " << index << " names '"
             << arg.value.getValue() << "', which is not a "
             << (arg.kind == LaunchArgKind::map ? "tensor map" : "buffer")
             << " of the module's 'moe.launch_plan'";
    if (arg.kind == LaunchArgKind::peers &&
        !plan.lookupBuffer(arg.value).getExchange())
      return kernel.emitOpError()
             << "'moe.launch' argument " << index << " (peers '"
             << arg.value.getValue()
             << "') names a buffer that is not an exchange buffer (no "
                "'exchange' in the plan), so it has no peer table";
    if (!takes(type, arg, plan))
      return kernel.emitOpError()
             << "'moe.launch' argument " << index << " ("
             << stringifyLaunchArgKind(arg.kind) << " '" << arg.value.getValue()
             << "') cannot be passed for a " << type;
  }
  auto func = dyn_cast<gpu::GPUFuncOp>(kernel.getOperation());
  DenseI32ArrayAttr knownBlock = func ? func.getKnownBlockSizeAttr() : nullptr;
  if (knownBlock && !llvm::equal(knownBlock.asArrayRef(), launch.getBlock()))
    return kernel.emitOpError()
           << "'moe.launch' block differs from the kernel's known_block_size";
  if (launch.getDependent())
    return verifyDependentKernel(kernel);
  return success();
}

/// Checks that `indices` name distinct pointer arguments of the kernel, the
/// tensor maps of its launch if it has one.
LogicalResult verifyGridConstantArgs(FunctionOpInterface kernel,
                                     DenseI64ArrayAttr indices) {
  ArrayRef<Type> types = kernel.getArgumentTypes();
  llvm::SmallBitVector seen(types.size());
  for (int64_t index : indices.asArrayRef()) {
    if (index < 0 || index >= static_cast<int64_t>(types.size()))
      return kernel.emitOpError()
             << "'moe.grid_constant_args' names argument " << index
             << " of a kernel with " << types.size() << " arguments";
    if (seen.test(index))
      return kernel.emitOpError()
             << "'moe.grid_constant_args' names argument " << index << " twice";
    seen.set(index);
    if (!isa<LLVM::LLVMPointerType>(types[index]))
      return kernel.emitOpError() << "'moe.grid_constant_args' names argument "
                                  << index << " of type " << types[index]
                                  << ", not a pointer to a tensor map";
  }
  auto *dialect = kernel->getContext()->getLoadedDialect<MoeDialect>();
  LaunchAttr launch = dialect->getLaunchAttrHelper().getAttr(kernel);
  // verifyLaunch reports a launch that does not match the arguments.
  if (!launch || launch.getArgs().size() != types.size())
    return success();
  for (auto [index, arg] : llvm::enumerate(launch.getArgs()))
    if ((arg.kind == LaunchArgKind::map) != seen.test(index))
      return kernel.emitOpError()
             << "'moe.grid_constant_args' must list exactly the tensor map "
                "arguments of 'moe.launch', but argument "
             << index << " differs";
  return success();
}
} // namespace

LogicalResult MoeDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attribute) {
  StringAttr name = attribute.getName();
  Attribute value = attribute.getValue();
  auto placementError = [&](StringRef expected) {
    return op->emitOpError() << "has '" << name.getValue() << "', which only "
                             << expected << " may carry";
  };
  auto typeError = [&](StringRef expected) {
    return op->emitOpError() << "expects '" << name.getValue() << "' to be "
                             << expected << ", got " << value;
  };
  if (name == getTunedAttrHelper().getName()) {
    if (!isa<UnitAttr>(value))
      return typeError("a unit attribute");
    if (!isa<GroupedMatmulOp>(op))
      return placementError("a moe.grouped_matmul");
    return success();
  }
  if (name == getExchangeAttrHelper().getName())
    return placementError("a function argument");
  if (name == getLaunchPlanAttrHelper().getName()) {
    if (!isa<LaunchPlanAttr>(value))
      return typeError("a #moe.launch_plan");
    if (!isa<gpu::GPUModuleOp>(op))
      return placementError("a gpu.module");
    return success();
  }
  if (name == getLaunchAttrHelper().getName()) {
    auto launch = dyn_cast<LaunchAttr>(value);
    if (!launch)
      return typeError("a #moe.launch");
    FunctionOpInterface kernel = asKernel(op);
    if (!kernel)
      return placementError("a kernel");
    return verifyLaunch(kernel, launch);
  }
  if (name == getGridConstantArgsAttrHelper().getName()) {
    auto indices = dyn_cast<DenseI64ArrayAttr>(value);
    if (!indices)
      return typeError("an array<i64> of argument indices");
    FunctionOpInterface kernel = asKernel(op);
    if (!kernel)
      return placementError("a kernel");
    return verifyGridConstantArgs(kernel, indices);
  }
  return op->emitOpError() << "has '" << name.getValue()
                           << "', which is not an attribute of the moe "
                              "dialect";
}

LogicalResult MoeDialect::verifyRegionArgAttribute(Operation *op,
                                                   unsigned regionIndex,
                                                   unsigned argIndex,
                                                   NamedAttribute attribute) {
  StringAttr name = attribute.getName();
  if (name != getExchangeAttrHelper().getName())
    return op->emitOpError()
           << "argument " << argIndex << " has '" << name.getValue()
           << "', which is not an argument attribute of the moe dialect";
  auto exchange = dyn_cast<ExpertParallelAttr>(attribute.getValue());
  if (!exchange)
    return op->emitOpError()
           << "expects '" << name.getValue() << "' of argument " << argIndex
           << " to be a #moe.expert_parallel, got " << attribute.getValue();
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function || regionIndex != 0)
    return op->emitOpError() << "has '" << name.getValue()
                             << "' on a region argument that is not a "
                                "function's";
  // A tensor, or the memref that bufferization makes of it (the pointers of
  // a lowered function carry the attribute on, unchecked).
  Type argType = function.getArgumentTypes()[argIndex];
  if (isa<LLVM::LLVMPointerType>(argType))
    return success();
  auto type = dyn_cast<ShapedType>(argType);
  if (!type || !type.hasRank() || type.getRank() < 2 ||
      type.getDimSize(0) != exchange.getWorld())
    return op->emitOpError()
           << "argument " << argIndex << " is an exchange buffer of "
           << exchange.getWorld() << " ranks ('" << name.getValue()
           << "') but its type " << function.getArgumentTypes()[argIndex]
           << " is not a ranked tensor or memref [" << exchange.getWorld()
           << ", ...] of one slice per rank";
  return success();
}
