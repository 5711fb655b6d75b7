//===- MoeOps.h - moe operations --------------------------------*- C++ -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOEOPS_H
#define MOE_DIALECT_MOE_IR_MOEOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "moe/Dialect/Moe/IR/MoeAttrs.h"
#include "moe/Dialect/Moe/IR/MoeDialect.h"
#include "moe/Dialect/Moe/IR/MoeLimits.h"
#include "moe/Dialect/Moe/IR/MoeTypes.h"

#define GET_OP_CLASSES
#include "moe/Dialect/Moe/IR/MoeOps.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOEOPS_H
