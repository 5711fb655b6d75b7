//===- MoeTypes.h - moe types -----------------------------------*- C++ -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOETYPES_H
#define MOE_DIALECT_MOE_IR_MOETYPES_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Types.h"

#define GET_TYPEDEF_CLASSES
#include "moe/Dialect/Moe/IR/MoeTypes.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOETYPES_H
