//===- Expression.cpp - Size expressions over the token count -------------===//

#include "Expression.h"

#include <cstring>

using namespace moe::runtime;

namespace {
/// Each nesting level holds at most three operands on the evaluation stack
/// while an inner one is evaluated (an expression's left term, a term's left
/// factor, a call's first argument); the innermost level holds at most three
/// with its atom.
constexpr int kStackSize = 3 * (Expression::kMaxNesting + 1);
} // namespace

/// A recursive-descent parser of the grammar in docs/BUNDLE.md that emits
/// the postfix program.
class Expression::Parser {
public:
  Parser(const std::string &text, std::vector<Op> &program)
      : text(text), program(program) {}

  Status parse() {
    if (!parseExpression())
      return status;
    if (position != text.size())
      return fail(std::string("unexpected '") + text[position] + "'");
    return Status();
  }

private:
  bool parseExpression() {
    if (!parseTerm())
      return false;
    while (position < text.size() &&
           (text[position] == '+' || text[position] == '-')) {
      OpKind kind = text[position] == '+' ? OpKind::Add : OpKind::Subtract;
      ++position;
      if (!parseTerm())
        return false;
      program.push_back({kind, 0});
    }
    return true;
  }

  bool parseTerm() {
    if (!parseFactor())
      return false;
    while (position < text.size() && text[position] == '*') {
      ++position;
      if (!parseFactor())
        return false;
      program.push_back({OpKind::Multiply, 0});
    }
    return true;
  }

  bool parseFactor() {
    if (position < text.size() && isDigit(text[position]))
      return parseInteger();
    if (consume("T")) {
      program.push_back({OpKind::Tokens, 0});
      return true;
    }
    if (consume("cdiv("))
      return parseCall(OpKind::CeilDiv);
    if (consume("max("))
      return parseCall(OpKind::Max);
    if (consume("min("))
      return parseCall(OpKind::Min);
    if (consume("(")) {
      if (!enter() || !parseExpression())
        return false;
      --nesting;
      return expect(")");
    }
    return expected("an integer, 'T', 'cdiv(', 'max(', 'min(' or '('");
  }

  /// The arguments and closing parenthesis of `cdiv(`, `max(` or `min(`.
  bool parseCall(OpKind kind) {
    if (!enter() || !parseExpression() || !expect(",") || !parseExpression() ||
        !expect(")"))
      return false;
    --nesting;
    program.push_back({kind, 0});
    return true;
  }

  bool parseInteger() {
    size_t start = position;
    int64_t value = 0;
    for (; position < text.size() && isDigit(text[position]); ++position) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text[position] - '0', &value)) {
        position = start;
        return failed("integer literal does not fit in 64 bits");
      }
    }
    program.push_back({OpKind::Constant, value});
    return true;
  }

  bool enter() {
    if (++nesting > kMaxNesting)
      return failed("nested deeper than " + std::to_string(kMaxNesting) +
                    " levels");
    return true;
  }

  static bool isDigit(char c) { return c >= '0' && c <= '9'; }

  bool consume(const char *literal) {
    size_t length = std::strlen(literal);
    if (text.compare(position, length, literal) != 0)
      return false;
    position += length;
    return true;
  }

  bool expect(const char *literal) {
    return consume(literal) || expected(std::string("'") + literal + "'");
  }

  bool expected(const std::string &what) { return failed("expected " + what); }

  bool failed(const std::string &message) {
    status = fail(message);
    return false;
  }

  Status fail(const std::string &message) const {
    return Status(MOE_ERROR_INVALID_BUNDLE, message + " at column " +
                                                std::to_string(position + 1) +
                                                " of '" + text + "'");
  }

  const std::string &text;
  std::vector<Op> &program;
  size_t position = 0;
  int nesting = 0;
  Status status;
};

Status Expression::parse(const std::string &text, Expression &expression) {
  expression.source = text;
  expression.program.clear();
  return Parser(text, expression.program).parse();
}

Status Expression::evaluate(int64_t tokens, int64_t &value) const {
  int64_t stack[kStackSize];
  int size = 0;
  for (const Op &op : program) {
    if (op.kind == OpKind::Constant || op.kind == OpKind::Tokens) {
      stack[size++] = op.kind == OpKind::Constant ? op.constant : tokens;
      continue;
    }
    int64_t rhs = stack[--size];
    int64_t &lhs = stack[size - 1];
    bool overflow = false;
    switch (op.kind) {
    case OpKind::Add:
      overflow = __builtin_add_overflow(lhs, rhs, &lhs);
      break;
    case OpKind::Subtract:
      overflow = __builtin_sub_overflow(lhs, rhs, &lhs);
      break;
    case OpKind::Multiply:
      overflow = __builtin_mul_overflow(lhs, rhs, &lhs);
      break;
    case OpKind::CeilDiv:
      if (rhs <= 0)
        return Status(MOE_ERROR_INVALID_BUNDLE,
                      "'" + source + "' divides by " + std::to_string(rhs) +
                          " at T=" + std::to_string(tokens) +
                          " (cdiv needs a positive divisor)");
      // Truncation rounds towards zero, which is the ceiling for a negative
      // quotient; neither step can overflow with a positive divisor.
      lhs = lhs / rhs + (lhs % rhs > 0 ? 1 : 0);
      break;
    case OpKind::Max:
      lhs = lhs > rhs ? lhs : rhs;
      break;
    case OpKind::Min:
      lhs = lhs < rhs ? lhs : rhs;
      break;
    case OpKind::Constant:
    case OpKind::Tokens:
      break;
    }
    if (overflow)
      return Status(MOE_ERROR_INVALID_BUNDLE,
                    "'" + source +
                        "' overflows 64 bits at T=" + std::to_string(tokens));
  }
  value = stack[0];
  return Status();
}
