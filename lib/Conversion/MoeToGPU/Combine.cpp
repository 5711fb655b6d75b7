//===- Combine.cpp - moe.combine to a GPU kernel --------------------------===//
//
// Each token's output row is the sum of its slot rows (weighted unless the
// second grouped matmul's epilogue applied the weights), in fp32; with ids,
// only of the slots the routing gave a row.
//
//===----------------------------------------------------------------------===//

#include "Lowerings.h"
#include "WarpBuilder.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::detail;

namespace {

constexpr int64_t kCombineThreads = 256;

/// One thread per 16 bytes of an output row: sum the token's slot rows.
} // namespace

void mlir::moe::detail::emitCombine(PlanBuilder &plan, OpBuilder &builder,
                                    CombineOp op) {
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
  bool masked = static_cast<bool>(op.getIds());

  KernelArgList args;
  unsigned rowsArg = args.add(plan.use(op.getRows()));
  std::optional<unsigned> weightsArg =
      args.addIf(weighted, [&] { return plan.use(op.getWeights()); });
  std::optional<unsigned> idsArg =
      args.addIf(masked, [&] { return plan.use(op.getIds()); });
  unsigned outputArg =
      args.add(plan.define(op.getOutput(), "combine_output",
                           {plan.tokens(), PlanBuilder::constant(hidden)}));
  gpu::GPUFuncOp kernel = plan.createKernel(
      builder, op.getLoc(), "moe_combine", args.get(),
      {PlanBuilder::ceilDiv(plan.affine(chunksPerRow, 0), kCombineThreads),
       PlanBuilder::constant(1), PlanBuilder::constant(1)},
      {kCombineThreads, 1, 1});
  ImplicitLocOpBuilder b(op.getLoc(), builder);
  WarpBuilder wb = makeWarpBuilder(b);
  Value rows = kernel.getArgument(rowsArg);
  Value weights = kernelArgument(kernel, weightsArg);
  Value ids = kernelArgument(kernel, idsArg);
  Value output = kernel.getArgument(outputArg);
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
          Value sum = arith::AddFOp::create(b, carried[0], row);
          if (!ids)
            return {sum};
          // Not `row * routed`: an unrouted slot's row may hold NaN.
          Value routed =
              wb.inRange(wb.load(ids, {token, s}), wb.i32(0),
                         wb.i32(static_cast<int64_t>(*op.getNumExperts())));
          return {wb.select(routed, sum, carried[0])};
        })[0];
    if (elementType != b.getF32Type())
      sum = arith::TruncFOp::create(b, rowVector, sum);
    vector::StoreOp::create(b, sum, output, ValueRange{token, column},
                            /*nontemporal=*/false, alignment);
  });
}
