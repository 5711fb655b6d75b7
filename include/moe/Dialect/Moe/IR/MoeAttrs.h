//===- MoeAttrs.h - moe enums and attributes --------------------*- C++ -*-===//

#ifndef MOE_DIALECT_MOE_IR_MOEATTRS_H
#define MOE_DIALECT_MOE_IR_MOEATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectImplementation.h"

#include "moe/Dialect/Moe/IR/MoeEnums.h.inc"

namespace mlir {
namespace moe {

/// One argument of a `#moe.launch`: the name of a buffer or of a tensor map
/// of the plan, or the size expression of an i32 scalar. Written `"name"`,
/// `map "name"` or `i32 "expr"`.
struct LaunchArg {
  LaunchArgKind kind;
  StringAttr value;

  bool operator==(const LaunchArg &other) const {
    return kind == other.kind && value == other.value;
  }
};
llvm::hash_code hash_value(const LaunchArg &arg);

namespace detail {
// The elements of the bracketed lists of the launch plan attributes.
ParseResult parseListElement(AsmParser &parser, int64_t &value);
ParseResult parseListElement(AsmParser &parser, StringAttr &value);
ParseResult parseListElement(AsmParser &parser, LaunchArg &value);
/// An attribute of this dialect, without its `#moe.<mnemonic>` prefix.
template <typename AttrT>
ParseResult parseListElement(AsmParser &parser, AttrT &value) {
  return parser.parseCustomAttributeWithFallback(value);
}
void printListElement(AsmPrinter &printer, int64_t value);
void printListElement(AsmPrinter &printer, StringAttr value);
void printListElement(AsmPrinter &printer, const LaunchArg &value);
template <typename AttrT>
void printListElement(AsmPrinter &printer, AttrT value) {
  printer.printStrippedAttrOrType(value);
}

/// `[a, b, ...]`, possibly empty.
template <typename T> FailureOr<SmallVector<T>> parseList(AsmParser &parser) {
  SmallVector<T> elements;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        return parseListElement(parser, elements.emplace_back());
      }))
    return failure();
  return elements;
}
template <typename T>
void printList(AsmPrinter &printer, ArrayRef<T> elements) {
  printer << '[';
  llvm::interleaveComma(elements, printer, [&](const T &element) {
    printListElement(printer, element);
  });
  printer << ']';
}
} // namespace detail
} // namespace moe
} // namespace mlir

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/Moe/IR/MoeAttrs.h.inc"

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_H
