//===- Lowerings.h - The kernels of each moe op -----------------*- C++ -*-===//
//
// convert-moe-to-gpu lowers each op of a layer to its kernels, appended to the
// launch plan in program order; one file per op (Gate.cpp, Route.cpp,
// Combine.cpp, Quantize.cpp, GroupedMatmul.cpp; ExpertParallel.cpp for the
// ops of the expert-parallel exchange and its completion).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_CONVERSION_MOETOGPU_LOWERINGS_H
#define MOE_LIB_CONVERSION_MOETOGPU_LOWERINGS_H

#include "PlanBuilder.h"

namespace mlir {
namespace moe {
namespace detail {

/// moe.gate: one warp per token scores, selects and weighs its experts.
LogicalResult emitGate(PlanBuilder &plan, OpBuilder &builder, GateOp op);

/// The positions of a gate's buffers among a kernel's arguments.
struct GateArgs {
  unsigned logits;
  std::optional<unsigned> bias;
  unsigned weights, ids;
};

/// Defines `op`'s outputs in the plan (weights and ids, [T, slots]);
/// returns their buffers.
std::pair<unsigned, unsigned> defineGateOutputs(PlanBuilder &plan, GateOp op);

/// Appends `op`'s buffers to `args`, defining its outputs in the plan.
GateArgs addGateArgs(PlanBuilder &plan, KernelArgList &args, GateOp op);

/// Emits the gate of `token` for the calling warp, its buffers the
/// arguments of `kernel` at `args`.
void emitGateToken(ImplicitLocOpBuilder &b, GateOp op, gpu::GPUFuncOp kernel,
                   const GateArgs &args, Value token);

/// The gate whose kernel the single-block route of `op` begins with, or
/// null: at decode, where `choiceTokens` give each of the route block's
/// warps at most one token to gate, a launch saved is worth more than the
/// gate's blocks running apart. The gate's outputs must be used nowhere
/// before the route, which computes them.
GateOp getFusedGate(RouteOp op, int64_t choiceTokens);

/// moe.route: a counting sort of the slots by expert on the device, in one
/// block when `choiceTokens`' slots fit one chunk (decode; that block also
/// computes the gate of its ids where getFusedGate gives one), else in
/// three kernels.
LogicalResult emitRoute(PlanBuilder &plan, OpBuilder &builder, RouteOp op,
                        int64_t choiceTokens);

/// moe.combine: each token's slot rows summed.
void emitCombine(PlanBuilder &plan, OpBuilder &builder, CombineOp op);

/// moe.ep_dispatch: up to 32 blocks per region of the ranks' receive
/// buffers, a part of the slots each, send it this rank's slots, in slot
/// order, through the peer tables; its `into` buffers must be exchange
/// buffer arguments.
LogicalResult emitEpDispatch(PlanBuilder &plan, OpBuilder &builder,
                             EpDispatchOp op);

/// moe.ep_route: blocks of one thread per local expert scan the experts'
/// padded counts, then place the positions, each finding its expert by
/// binary search and its region by the counts.
LogicalResult emitEpRoute(PlanBuilder &plan, OpBuilder &builder, EpRouteOp op);

/// moe.ep_combine: one warp per current receive row stores it at its slot
/// of its source rank's return buffer, through the peer table; its `into`
/// buffer must be an exchange buffer argument.
LogicalResult emitEpCombine(PlanBuilder &plan, OpBuilder &builder,
                            EpCombineOp op);

/// moe.ep_signal: one block of a thread per rank d adds one to flags[d, R]
/// with release semantics at system scope, through the flags' peer table.
LogicalResult emitEpSignal(PlanBuilder &plan, OpBuilder &builder,
                           EpSignalOp op);

/// moe.ep_wait: one block of a thread per source rank s spins on
/// flags[R, s] (acquire, system scope) until it caught up with this rank's
/// own counter, or records the source in the status past a timeout.
LogicalResult emitEpWait(PlanBuilder &plan, OpBuilder &builder, EpWaitOp op);

/// moe.quantize: one warp per row and group of columns.
void emitQuantize(PlanBuilder &plan, OpBuilder &builder, QuantizeOp op);

/// moe.grouped_matmul: the tensor-core kernel its config describes, or the
/// SIMT kernel for ops without one.
LogicalResult emitGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
                                GroupedMatmulOp op, int64_t tokens);

/// The most column tiles a block holds the values of (rounded, in
/// registers) for one fused quantization group: 3 x 16 registers of 64
/// bf16 columns, or 3 x 8 of 32.
constexpr int64_t kMaxQuantizedColumnTiles = 4;

/// The moe.quantize of `op`'s output that `op`'s epilogue computes in place
/// of a quantize kernel (and of the output's round trip through memory), or
/// null: the only use of a sorted output, over the padded rows, by a
/// tensor-core kernel without K splits or routed weights, of even columns,
/// with a static scale or groups of columns that a block's tile can span
/// (at most kMaxQuantizedColumnTiles column tiles per group, or whole
/// groups in one tile), and not at decode `tokens` (isWeightStreaming).
QuantizeOp getEpilogueQuantize(GroupedMatmulOp op, int64_t tokens);

} // namespace detail
} // namespace moe
} // namespace mlir

#endif // MOE_LIB_CONVERSION_MOETOGPU_LOWERINGS_H
