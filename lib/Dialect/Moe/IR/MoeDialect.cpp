//===- MoeDialect.cpp - The moe dialect -----------------------------------===//

#include "moe/Dialect/Moe/IR/MoeDialect.h"
#include "moe/Dialect/Moe/IR/MoeAttrs.h"
#include "moe/Dialect/Moe/IR/MoeOps.h"
#include "moe/Dialect/Moe/IR/MoeTypes.h"

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
