//===- LoopBuilder.h - Loop nests over buffers, tersely ---------*- C++ -*-===//
//
// A thin layer over ImplicitLocOpBuilder shared by the moe lowerings (CPU
// loops and GPU kernels): constants, loads and stores that widen to and
// narrow from f32, scf loops and ifs built from lambdas, and the buffer
// plumbing of tensor-level rewrites.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOECOMMON_LOOPBUILDER_H
#define MOE_CONVERSION_MOECOMMON_LOOPBUILDER_H

#include "moe/Conversion/MoeCommon/Fp8Math.h"
#include "moe/Conversion/MoeCommon/RoutingMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <functional>

namespace mlir {
namespace moe {

/// Builds loop nests over buffers at one location: a thin layer over
/// ImplicitLocOpBuilder that keeps the lowerings below readable.
struct LoopBuilder {
  ImplicitLocOpBuilder &b;

  Value index(int64_t value) {
    return arith::ConstantIndexOp::create(b, value);
  }
  Value f32(double value) {
    return arith::ConstantFloatOp::create(b, b.getF32Type(),
                                          APFloat(static_cast<float>(value)));
  }
  Value i32(int64_t value) {
    return arith::ConstantIntOp::create(b, b.getI32Type(), value);
  }
  Value toIndex(Value i32Value) {
    return arith::IndexCastOp::create(b, b.getIndexType(), i32Value);
  }
  Value toI32(Value indexValue) {
    return arith::IndexCastOp::create(b, b.getI32Type(), indexValue);
  }
  Value load(Value memref, ValueRange indices) {
    return memref::LoadOp::create(b, memref, indices);
  }
  /// Loads an element and widens it to f32 (e4m3 through its i8 code: LLVM
  /// has no f8 type).
  Value loadF32(Value memref, ValueRange indices) {
    Value value = load(memref, indices);
    if (value.getType().isF32())
      return value;
    if (isa<Float8E4M3FNType>(value.getType()))
      return emitF32FromE4M3(b, b.getLoc(),
                             arith::BitcastOp::create(b, b.getI8Type(), value));
    return arith::ExtFOp::create(b, b.getF32Type(), value);
  }
  void store(Value value, Value memref, ValueRange indices) {
    memref::StoreOp::create(b, value, memref, indices);
  }
  /// Narrows an f32 to the element type of `memref` and stores it.
  void storeF32(Value value, Value memref, ValueRange indices) {
    Type elementType = cast<MemRefType>(memref.getType()).getElementType();
    if (isa<Float8E4M3FNType>(elementType))
      value = arith::BitcastOp::create(b, elementType,
                                       emitE4M3FromF32(b, b.getLoc(), value));
    else if (elementType != value.getType())
      value = arith::TruncFOp::create(b, elementType, value);
    store(value, memref, indices);
  }
  Value dim(Value memref, int64_t dim) {
    return memref::DimOp::create(b, memref, dim);
  }

  /// Emits `for iv in [lb, ub) step step` carrying `inits`; `body` returns
  /// the values yielded to the next iteration. Returns the loop results.
  SmallVector<Value>
  loop(Value lb, Value ub, ValueRange inits,
       function_ref<SmallVector<Value>(Value, ValueRange)> body,
       int64_t step = 1) {
    auto forOp = scf::ForOp::create(b, lb, ub, index(step), inits);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forOp.getBody());
    SmallVector<Value> yielded =
        body(forOp.getInductionVar(), forOp.getRegionIterArgs());
    if (!inits.empty())
      scf::YieldOp::create(b, yielded);
    return forOp.getResults();
  }
  /// Emits `for iv in [lb, ub) step step` without loop-carried values.
  void loop(Value lb, Value ub, function_ref<void(Value)> body,
            int64_t step = 1) {
    loop(
        lb, ub, {},
        [&](Value iv, ValueRange) {
          body(iv);
          return SmallVector<Value>();
        },
        step);
  }
  void loop(int64_t ub, function_ref<void(Value)> body) {
    loop(index(0), index(ub), body);
  }
  /// Emits `if (cond) body`.
  void ifThen(Value cond, function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    body();
  }
  /// Emits `if (cond) thenBody else elseBody`.
  void ifThenElse(Value cond, function_ref<void()> thenBody,
                  function_ref<void()> elseBody) {
    auto ifOp = scf::IfOp::create(b, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    thenBody();
    b.setInsertionPointToStart(ifOp.elseBlock());
    elseBody();
  }

  /// Emits `cond ? thenBody() : orElse` for values: an scf.if whose then
  /// branch yields what `thenBody` returns (of orElse's types) and whose else
  /// branch yields `orElse`.
  SmallVector<Value> ifThenOr(Value cond, ValueRange orElse,
                              function_ref<SmallVector<Value>()> thenBody) {
    auto ifOp = scf::IfOp::create(b, orElse.getTypes(), cond,
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, thenBody());
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, orElse);
    return ifOp.getResults();
  }
  Value cmpf(arith::CmpFPredicate predicate, Value lhs, Value rhs) {
    return arith::CmpFOp::create(b, predicate, lhs, rhs);
  }
  Value cmpi(arith::CmpIPredicate predicate, Value lhs, Value rhs) {
    return arith::CmpIOp::create(b, predicate, lhs, rhs);
  }
  Value select(Value cond, Value lhs, Value rhs) {
    return arith::SelectOp::create(b, cond, lhs, rhs);
  }
  Value isNaN(Value value) {
    return cmpf(arith::CmpFPredicate::UNO, value, value);
  }
  /// `lhs <= value < rhs` on indices.
  Value inRange(Value value, Value lower, Value upper) {
    return arith::AndIOp::create(b,
                                 cmpi(arith::CmpIPredicate::sge, value, lower),
                                 cmpi(arith::CmpIPredicate::slt, value, upper));
  }

  /// Returns the index in [lb, ub) of the best `valueAt(i)` among those with
  /// `isCandidate(i)`, under emitRanksAbove (ties: lowest index), and its
  /// value. The caller guarantees a candidate exists.
  std::pair<Value, Value> argBest(Value lb, Value ub,
                                  function_ref<Value(Value)> valueAt,
                                  function_ref<Value(Value)> isCandidate) {
    Value none = arith::ConstantIntOp::create(b, b.getI1Type(), 0);
    SmallVector<Value> best = loop(
        lb, ub, {index(0), f32(0.0), none},
        [&](Value i, ValueRange carried) -> SmallVector<Value> {
          Value value = valueAt(i);
          Value found = carried[2];
          Value notFound = arith::XOrIOp::create(
              b, found, arith::ConstantIntOp::create(b, b.getI1Type(), 1));
          Value better = arith::OrIOp::create(
              b, notFound, emitRanksAbove(b, b.getLoc(), value, carried[1]));
          Value take = arith::AndIOp::create(b, isCandidate(i), better);
          Value taken = arith::OrIOp::create(b, found, take);
          return {select(take, i, carried[0]), select(take, value, carried[1]),
                  taken};
        });
    return {best[0], best[1]};
  }

  /// Reads a tensor operand as a buffer of the same shape.
  Value toBuffer(Value tensor) {
    auto type = cast<RankedTensorType>(tensor.getType());
    auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
    return bufferization::ToBufferOp::create(b, memrefType, tensor,
                                             /*read_only=*/true);
  }
  /// Allocates the buffer of a result, its dynamic sizes given in order.
  Value alloc(Type tensorType, ValueRange dynamicSizes = {}) {
    auto type = cast<RankedTensorType>(tensorType);
    return memref::AllocOp::create(
        b, MemRefType::get(type.getShape(), type.getElementType()),
        dynamicSizes);
  }
  /// A scratch buffer of static shape; buffer deallocation frees it.
  Value scratch(ArrayRef<int64_t> shape, Type elementType) {
    return memref::AllocOp::create(b, MemRefType::get(shape, elementType));
  }
  Value toTensor(Type tensorType, Value buffer) {
    return bufferization::ToTensorOp::create(b, tensorType, buffer,
                                             /*restrict=*/true,
                                             /*writable=*/true);
  }
  /// Fills every element of `buffer` (rank 1 to 3) with `value`.
  void fill(Value buffer, Value value) {
    auto type = cast<MemRefType>(buffer.getType());
    SmallVector<Value> indices;
    std::function<void(int64_t)> fillFrom = [&](int64_t dim) {
      if (dim == type.getRank()) {
        store(value, buffer, indices);
        return;
      }
      loop(index(0), this->dim(buffer, dim), [&](Value i) {
        indices.push_back(i);
        fillFrom(dim + 1);
        indices.pop_back();
      });
    };
    fillFrom(0);
  }
};

} // namespace moe
} // namespace mlir

#endif // MOE_CONVERSION_MOECOMMON_LOOPBUILDER_H
