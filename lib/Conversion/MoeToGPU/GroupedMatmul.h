//===- GroupedMatmul.h - The kernels of moe.grouped_matmul ------*- C++ -*-===//
//
// What the files of the grouped-matmul lowering share: the plan buffers of
// the op's operands and output, and the kernel families.
//
//   GroupedMatmul.cpp       dispatch, and the checks of a config against the
//                           wgmma kernel
//   WgmmaGroupedMatmul.cpp  the tensor-core kernel (TMA / cp.async ring,
//                           wgmma, warp specialization, persistent tiles)
//   SplitK.cpp              split-K partial sums and their reduction kernel
//   GroupedMatmulSimt.cpp   the SIMT kernel (f32, rows TMA cannot address)
//   Hopper.h                descriptors, ring and fragment arithmetic
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_CONVERSION_MOETOGPU_GROUPEDMATMUL_H
#define MOE_LIB_CONVERSION_MOETOGPU_GROUPEDMATMUL_H

#include "PlanBuilder.h"

namespace mlir {
namespace moe {
namespace detail {

/// The fast-math flags of the GPU epilogues' activation: libdevice's fast
/// exp and an approximate division (a few ulp of f32; the outputs are
/// compared to a tolerance). The IEEE division and the accurate exp made the
/// SiLU about 20 instructions a value, most of the epilogue.
constexpr arith::FastMathFlags kEpilogueFastMath = arith::FastMathFlags::afn;

/// What the kernels of a grouped matmul read off the op: its sizes, row
/// orders and epilogue.
struct GemmShape {
  explicit GemmShape(GroupedMatmulOp op)
      : numExperts(op.getNumStoredExperts()), k(op.getReductionSize()),
        slots(op.getNumSlots()), blockM(op.getBlockM()),
        columns(op.getOutputColumns()), activation(op.getActivation()),
        swiglu(op.getSwigluAttr()), gated(op.isGated()),
        tokenInput(op.getInputOrder() == RowOrder::token),
        slotOutput(op.getOutputOrder() == RowOrder::slot),
        weighted(static_cast<bool>(op.getRoutedWeights())),
        biased(static_cast<bool>(op.getBias())) {}

  int64_t numExperts, k, slots, blockM, columns;
  Activation activation;
  SwigluAttr swiglu;
  bool gated, tokenInput, slotOutput, weighted, biased;
};

/// The token count T of `op` when its token-order operands have a static
/// one (an expert-parallel experts phase's receive rows, whose count is not
/// the launch's T); none when T is the launch's.
std::optional<int64_t> getStaticTokens(GroupedMatmulOp op);
/// T: the static token count of `op`, else the plan's T.
SizeExpr gemmTokens(PlanBuilder &plan, GroupedMatmulOp op);
/// T*S, the op's routed slots.
SizeExpr routedSlots(PlanBuilder &plan, GroupedMatmulOp op);
/// T*S in `kernel`: a constant, or the launch's T times S.
Value routedSlotCount(LoopBuilder &lb, gpu::GPUFuncOp kernel,
                      GroupedMatmulOp op);

/// The routing capacity C = T*S + E*(block_m - 1) of the op's sorted rows.
SizeExpr routedCapacity(PlanBuilder &plan, GroupedMatmulOp op);

/// The most rows the routing pads the op's slots to: an expert with rows
/// pads them to whole routing blocks, and at most min(T*S, E) experts have
/// rows, so T*S + min(T*S, E)*(block_m - 1), at most C. The grids sized by
/// row blocks launch this many, not C's: at decode C's are mostly empty
/// (Qwen3-30B-A3B at T = 1: 8 row blocks of 64 can hold rows, C has 127).
SizeExpr paddedRowsBound(PlanBuilder &plan, GroupedMatmulOp op);
/// The same bound in a kernel, given its T*S (routedSlotCount).
Value paddedRowsBound(LoopBuilder &lb, Value routedSlots, GroupedMatmulOp op);

/// The plan buffers of a grouped matmul's input rows and routing operands,
/// given the dims the op derives for them from the capacity C: sorted ids
/// [C], block experts [ceil(C / block_m)], sorted input rows [C, K].
struct GemmOperands {
  SizeExpr capacity;
  unsigned rows, sortedIds, expertIds;
};
GemmOperands useGemmOperands(PlanBuilder &plan, GroupedMatmulOp op);

/// Registers the op's output buffer: [T, S, N'] in slot order, [C, N'] in
/// sorted order.
unsigned defineOutput(PlanBuilder &plan, GroupedMatmulOp op);

/// The shared-memory tiled SIMT kernel.
LogicalResult emitSimtGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
                                    GroupedMatmulOp op);

/// Whether the tensor-core kernel of `op` at `tokens` tokens loads its rows
/// under an L2 evict_last policy: when its experts average at most two row
/// blocks each, so that each weight tile serves a block or two while every
/// column tile reads a row block's rows again (layers there gained 1-4 %).
/// With more row blocks an expert the weight tiles are reused as well, and
/// no gain was measured: Mixtral-8x7B at 2048 and 4096 (four and eight)
/// moved within their run-to-run spread. Not with MXFP4 weights, whose
/// producers decode each weight tile and bound the kernel: the policy's
/// longer gather code cost gpt-oss-120b 1-2 % (bench/RESULTS.md).
bool rowsEvictLast(GroupedMatmulOp op, int64_t tokens);

/// The tensor-core kernel of `config`, which checkWgmmaConfig accepted; it
/// computes `epilogueQuantize` (getEpilogueQuantize) when given, and loads
/// its rows under L2 evict_last with `rowsEvictLast`.
void emitWgmmaGroupedMatmul(PlanBuilder &plan, OpBuilder &builder,
                            GroupedMatmulOp op, GemmConfigAttr config,
                            QuantizeOp epilogueQuantize, bool rowsEvictLast);

/// The workspaces of a split-K grouped matmul: fp32 partial sums [splits,
/// T*S, N] per routed slot, and each slot's sorted row [T*S].
struct ReductionBuffers {
  unsigned partials, slotRows;
};
ReductionBuffers defineReductionBuffers(PlanBuilder &plan, OpBuilder &builder,
                                        GroupedMatmulOp op, int64_t splits);

/// The slot of a block's row (given relative to the block), and whether it
/// is a routed slot of the block.
using SlotOfRow = function_ref<std::pair<Value, Value>(Value)>;

/// A split's partial sums, from the accumulator fragment of a thread whose
/// first row and column are `laneRow` and `laneColumn`.
struct SplitPartials {
  Value accumulators, laneRow, laneColumn, firstRow, firstColumn, split;
};
void storePartials(LoopBuilder &lb, const SplitPartials &partials,
                   SlotOfRow slotOf, Value partialsBuffer, Value slotRows,
                   GroupedMatmulOp op, GemmConfigAttr config);

/// The kernel that adds the splits' partial sums and runs the epilogue.
void emitSplitReduction(PlanBuilder &plan, OpBuilder &builder,
                        GroupedMatmulOp op, int64_t splits,
                        const ReductionBuffers &buffers);

} // namespace detail
} // namespace moe
} // namespace mlir

#endif // MOE_LIB_CONVERSION_MOETOGPU_GROUPEDMATMUL_H
