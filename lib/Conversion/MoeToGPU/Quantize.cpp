//===- Quantize.cpp - moe.quantize to a GPU kernel ------------------------===//
//
// One warp per (row, group of columns): the group's amax by a butterfly of
// NaN-propagating maxima and its scale, or the given static scale read once
// per warp, then each element divided by the scale and rounded to e4m3 by
// `cvt.rn.satfinite`, exactly as the op defines. The warps stride over the
// (row, group) pairs of the rows computed, in a grid of at most the blocks
// the multiprocessors hold at once: sized for the buffer's rows (a layer's
// routing capacity), one warp per pair launched some 30,000 blocks at T = 1
// whose work was to exit (23 us of a 235 us DeepSeek-V3 decode step).
//
//===----------------------------------------------------------------------===//

#include "Lowerings.h"
#include "WarpBuilder.h"

#include "moe/Conversion/MoeCommon/Fp8Math.h"

#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

constexpr int64_t kQuantizeWarps = 8;
/// Blocks of kQuantizeWarps warps one multiprocessor holds (2048 threads).
constexpr int64_t kResidentQuantizeBlocks = 2048 / (kQuantizeWarps * kWarpSize);

/// `value` (f32) rounded to e4m3 as Hopper converts: nearest, ties to even,
/// saturating to +-448, NaN kept.
Value roundToE4M3(ImplicitLocOpBuilder &b, Value value) {
  Type f8 = b.getType<Float8E4M3FNType>();
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  // The pair's second value lands in the low byte.
  Value pair = NVVM::ConvertF32x2ToF8x2Op::create(
      b, b.getI16Type(), zero, value, NVVM::FPRoundingMode::RN,
      NVVM::SaturationMode::SATFINITE, /*relu=*/false, f8);
  return arith::BitcastOp::create(
      b, f8, arith::TruncIOp::create(b, b.getI8Type(), pair));
}

} // namespace

void mlir::moe::detail::emitQuantize(PlanBuilder &plan, OpBuilder &builder,
                                     QuantizeOp op) {
  OpBuilder::InsertionGuard guard(builder);
  auto inputType = cast<RankedTensorType>(op.getInput().getType());
  int64_t k = inputType.getDimSize(1), groupSize = op.getGroupSize();
  int64_t groups = llvm::divideCeil(k, groupSize);

  KernelArgList args;
  unsigned inputArg = args.add(plan.use(op.getInput()));
  SizeExpr rows = plan.dimOf(args.get().back().index, 0);
  std::optional<unsigned> scaleArg =
      args.addIf(static_cast<bool>(op.getScale()),
                 [&] { return plan.use(op.getScale()); });
  std::optional<unsigned> numRowsArg =
      args.addIf(static_cast<bool>(op.getNumRows()),
                 [&] { return plan.use(op.getNumRows()); });
  unsigned outputArg = args.add(plan.define(op.getOutput(), "quantized",
                                            {rows, PlanBuilder::constant(k)}));
  unsigned scalesArg =
      args.add(plan.define(op.getScales(), "quantize_scales",
                           {rows, PlanBuilder::constant(groups)}));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_quantize", args.get(),
      {PlanBuilder::min(
           PlanBuilder::ceilDiv(rows.times(groups), kQuantizeWarps),
           plan.numSMs * kResidentQuantizeBlocks),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kQuantizeWarps * kWarpSize, 1, 1});

  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value input = kernel.getArgument(inputArg);
  Value output = kernel.getArgument(outputArg);
  Value scales = kernel.getArgument(scalesArg);
  // Rows computed: the count given, else the input's (T when dynamic).
  Value rowLimit =
      numRowsArg ? wb.toIndex(wb.load(kernel.getArgument(*numRowsArg), {}))
      : inputType.isDynamicDim(0) ? wb.toIndex(tokenCount(kernel))
                                  : wb.index(inputType.getDimSize(0));
  Value warpIndex = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            wb.index(kQuantizeWarps)),
      arith::DivUIOp::create(b, gpu::ThreadIdOp::create(b, gpu::Dimension::x),
                             wb.index(kWarpSize)));
  Value numWarps =
      arith::MulIOp::create(b, gpu::GridDimOp::create(b, gpu::Dimension::x),
                            wb.index(kQuantizeWarps));
  Value staticScale =
      scaleArg ? wb.load(kernel.getArgument(*scaleArg), {wb.index(0)})
               : Value();
  // Each warp's loop is uniform in the warp, so its shuffles see every lane.
  auto pairs = scf::ForOp::create(
      b, warpIndex, arith::MulIOp::create(b, rowLimit, wb.index(groups)),
      numWarps);
  b.setInsertionPointToStart(pairs.getBody());
  Value pair = pairs.getInductionVar();
  Value row = arith::DivUIOp::create(b, pair, wb.index(groups));
  Value group = arith::RemUIOp::create(b, pair, wb.index(groups));
  Value first = arith::MulIOp::create(b, group, wb.index(groupSize));
  Value last = arith::MinUIOp::create(
      b, arith::AddIOp::create(b, first, wb.index(groupSize)), wb.index(k));
  Value laneFirst = arith::AddIOp::create(b, first, wb.lane);
  // The lanes stride over the group's columns, carrying one value.
  auto overGroup = [&](Value init, auto body) {
    return wb.loop(
        laneFirst, last, {init},
        [&](Value column, ValueRange carried) -> SmallVector<Value> {
          return {body(column, carried[0])};
        },
        kWarpSize)[0];
  };
  auto amaxScale = [&]() -> Value {
    Value laneAmax = overGroup(wb.f32(0.0), [&](Value column, Value amax) {
      Value value = math::AbsFOp::create(b, wb.loadF32(input, {row, column}));
      return arith::MaximumFOp::create(b, amax, value).getResult();
    });
    Value amax = wb.allReduce(laneAmax, [&](Value x, Value y) -> Value {
      return arith::MaximumFOp::create(b, x, y);
    });
    return emitQuantizationScale(b, b.getLoc(), amax);
  };
  Value scale = staticScale ? staticScale : amaxScale();
  wb.ifThen(wb.cmpi(arith::CmpIPredicate::eq, wb.lane, wb.index(0)),
            [&] { wb.store(scale, scales, {row, group}); });
  overGroup(wb.f32(0.0), [&](Value column, Value unused) {
    Value value = wb.loadF32(input, {row, column});
    wb.store(roundToE4M3(b, arith::DivFOp::create(b, value, scale)), output,
             {row, column});
    return unused;
  });
}
