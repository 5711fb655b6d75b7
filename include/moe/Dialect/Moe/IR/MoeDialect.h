//===- MoeDialect.h - The moe dialect ---------------------------*- C++ -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOEDIALECT_H
#define MOE_DIALECT_MOE_IR_MOEDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Operation.h"

#include "moe/Dialect/Moe/IR/MoeAttrs.h"

#include "moe/Dialect/Moe/IR/MoeDialect.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOEDIALECT_H
