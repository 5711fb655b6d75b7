//===- ExpressionTest.cpp - Size expressions of bundle manifests ----------===//
//
// Pins down the grammar of docs/BUNDLE.md (precedence, associativity, cdiv
// and max), the parse errors with their columns, and the evaluation errors:
// 64-bit overflow and cdiv by a divisor that is not positive.
//
//===----------------------------------------------------------------------===//

#include "Expression.h"

#include "gtest/gtest.h"

using namespace moe::runtime;

namespace {

/// Parses `text` (which must parse) and evaluates it at `tokens`.
int64_t evaluate(const std::string &text, int64_t tokens = 0) {
  Expression expression;
  Status status = Expression::parse(text, expression);
  EXPECT_TRUE(status.ok()) << status.message();
  int64_t value = -12345;
  status = expression.evaluate(tokens, value);
  EXPECT_TRUE(status.ok()) << status.message();
  return value;
}

/// The message of parsing `text`, which must fail.
std::string parseError(const std::string &text) {
  Expression expression;
  Status status = Expression::parse(text, expression);
  EXPECT_FALSE(status.ok()) << text;
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  return status.message();
}

/// The message of evaluating `text` at `tokens`, which must fail.
std::string evaluationError(const std::string &text, int64_t tokens) {
  Expression expression;
  Status status = Expression::parse(text, expression);
  EXPECT_TRUE(status.ok()) << status.message();
  int64_t value = 0;
  status = expression.evaluate(tokens, value);
  EXPECT_FALSE(status.ok()) << text;
  return status.message();
}

TEST(Expression, LiteralsAndTokens) {
  EXPECT_EQ(evaluate("0"), 0);
  EXPECT_EQ(evaluate("256"), 256);
  EXPECT_EQ(evaluate("T", 7), 7);
  EXPECT_EQ(evaluate("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(evaluate("007"), 7);
}

TEST(Expression, PrecedenceAndAssociativity) {
  EXPECT_EQ(evaluate("1+2*3"), 7);
  EXPECT_EQ(evaluate("(1+2)*3"), 9);
  EXPECT_EQ(evaluate("10-3-2"), 5);
  EXPECT_EQ(evaluate("10-(3-2)"), 9);
  EXPECT_EQ(evaluate("2*3*4"), 24);
  EXPECT_EQ(evaluate("T*9+1", 5), 46);
  EXPECT_EQ(evaluate("1-T*2", 5), -9);
  EXPECT_EQ(evaluate("((T))", 3), 3);
}

TEST(Expression, CeilDivAndMax) {
  EXPECT_EQ(evaluate("cdiv(T,4)", 1), 1);
  EXPECT_EQ(evaluate("cdiv(T,4)", 4), 1);
  EXPECT_EQ(evaluate("cdiv(T,4)", 5), 2);
  EXPECT_EQ(evaluate("cdiv(0,4)"), 0);
  EXPECT_EQ(evaluate("cdiv(T*9,1024)", 16384), 144);
  // The ceiling of a negative quotient rounds towards zero.
  EXPECT_EQ(evaluate("cdiv(0-7,2)"), -3);
  EXPECT_EQ(evaluate("cdiv(9223372036854775807,1)"), INT64_MAX);
  EXPECT_EQ(evaluate("max(T,64)", 10), 64);
  EXPECT_EQ(evaluate("max(T,64)", 100), 100);
  EXPECT_EQ(evaluate("max(0-5,0-6)"), -5);
  EXPECT_EQ(evaluate("max(cdiv(T,4),1)*128+cdiv(max(T,2),2)", 9), 389);
  EXPECT_EQ(evaluate("min(T,264)", 10), 10);
  EXPECT_EQ(evaluate("min(cdiv(T*8+8064,64)*12,264)", 1), 264);
  EXPECT_EQ(evaluate("min(0-5,0-6)"), -6);
}

TEST(Expression, KeepsItsText) {
  Expression expression;
  ASSERT_TRUE(Expression::parse("cdiv(T,4)", expression).ok());
  EXPECT_EQ(expression.text(), "cdiv(T,4)");
}

TEST(Expression, ParseErrorsNameTheColumn) {
  EXPECT_EQ(parseError(""),
            "expected an integer, 'T', 'cdiv(', 'max(', 'min(' or "
            "'(' at column 1 of ''");
  EXPECT_EQ(parseError("T+"),
            "expected an integer, 'T', 'cdiv(', 'max(', 'min(' or "
            "'(' at column 3 of 'T+'");
  EXPECT_EQ(parseError("cdiv(T,4"), "expected ')' at column 9 of 'cdiv(T,4'");
  EXPECT_EQ(parseError("cdiv(T)"), "expected ',' at column 7 of 'cdiv(T)'");
  EXPECT_EQ(parseError("max(1,2,3)"),
            "expected ')' at column 8 of 'max(1,2,3)'");
  EXPECT_EQ(parseError("2T"), "unexpected 'T' at column 2 of '2T'");
  EXPECT_EQ(parseError("(1+2))"), "unexpected ')' at column 6 of '(1+2))'");
  EXPECT_EQ(parseError("99999999999999999999"),
            "integer literal does not fit in 64 bits at column 1 of "
            "'99999999999999999999'");
  EXPECT_NE(parseError("9223372036854775808").find("does not fit"),
            std::string::npos);
}

TEST(Expression, RejectsWhatTheGrammarLacks) {
  for (const char *text : {"-1", "+1", "t", "T/2", "abs(1)", "cdiv (T,2)",
                           "T 1", "cdiv", "max()", "1.5", "(", "()"})
    parseError(text);
}

TEST(Expression, NestingLimit) {
  std::string allowed = "T", tooDeep;
  for (int i = 0; i < Expression::kMaxNesting; ++i)
    allowed = "(" + allowed + ")";
  EXPECT_EQ(evaluate(allowed, 3), 3);
  tooDeep = "(" + allowed + ")";
  EXPECT_NE(parseError(tooDeep).find("nested deeper than 32 levels"),
            std::string::npos);
  EXPECT_NE(parseError("max(1," + allowed + ")").find("nested deeper"),
            std::string::npos);
}

// Every level keeps three operands pending (a sum's left term, a product's
// left factor and cdiv's first argument), the worst case for the fixed
// evaluation stack.
TEST(Expression, DeepestStackEvaluates) {
  std::string text = "1+1*1";
  for (int i = 0; i < Expression::kMaxNesting; ++i)
    text = "1+1*cdiv(1," + text + ")";
  EXPECT_EQ(evaluate(text), 2);
}

TEST(Expression, OverflowIsAnError) {
  EXPECT_EQ(evaluationError("9223372036854775807+T", 1),
            "'9223372036854775807+T' overflows 64 bits at T=1");
  EXPECT_NE(evaluationError("T*T", int64_t(1) << 32).find("overflows"),
            std::string::npos);
  EXPECT_NE(evaluationError("0-9223372036854775807-2", 0).find("overflows"),
            std::string::npos);
  EXPECT_NE(evaluationError("max(T*T,1)", int64_t(1) << 40).find("overflows"),
            std::string::npos);
}

TEST(Expression, CeilDivNeedsAPositiveDivisor) {
  EXPECT_EQ(evaluationError("cdiv(T,0)", 3),
            "'cdiv(T,0)' divides by 0 at T=3 (cdiv needs a positive divisor)");
  EXPECT_EQ(evaluationError("cdiv(1,T-5)", 4),
            "'cdiv(1,T-5)' divides by -1 at T=4 (cdiv needs a positive "
            "divisor)");
  EXPECT_EQ(evaluate("cdiv(1,T-5)", 6), 1);
}

} // namespace
