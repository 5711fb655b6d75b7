//===- Expression.h - Size expressions over the token count -----*- C++ -*-===//
//
// The integer expressions of a bundle manifest (docs/BUNDLE.md, "Size
// expressions"): +, -, *, cdiv, max and parentheses over integer literals and
// the token count T, evaluated in 64-bit signed arithmetic with overflow and
// division checks.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_RUNTIME_EXPRESSION_H
#define MOE_LIB_RUNTIME_EXPRESSION_H

#include "moe/Runtime/Runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe {
namespace runtime {

/// A parsed size expression, kept as a postfix program so that evaluation
/// needs neither recursion nor allocation (it runs on every launch).
class Expression {
public:
  /// Parses `text`; on failure the message names the column and what was
  /// expected there.
  static Status parse(const std::string &text, Expression &expression);

  /// Evaluates the expression at T = `tokens`; fails on 64-bit overflow and
  /// on a `cdiv` divisor that is not positive.
  Status evaluate(int64_t tokens, int64_t &value) const;

  /// The text the expression was parsed from.
  const std::string &text() const { return source; }

  /// Nesting of parentheses and calls beyond which parsing fails; it bounds
  /// the parser's recursion and the evaluation stack.
  static constexpr int kMaxNesting = 32;

private:
  enum class OpKind {
    Constant,
    Tokens,
    Add,
    Subtract,
    Multiply,
    CeilDiv,
    Max,
    Min
  };
  struct Op {
    OpKind kind;
    int64_t constant;
  };
  class Parser;

  std::string source;
  std::vector<Op> program;
};

} // namespace runtime
} // namespace moe

#endif // MOE_LIB_RUNTIME_EXPRESSION_H
