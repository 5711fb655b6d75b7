//===- SourceLimits.cpp - What the tools parse, bounded -------------------===//

#include "moe/Support/SourceLimits.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"

using namespace mlir;
using namespace mlir::moe;

namespace {
llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

bool isIdentifierStart(char c) { return llvm::isAlpha(c) || c == '_'; }

bool isIdentifierChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.';
}

/// Counts checkSource's nesting through one source.
class NestingScanner {
public:
  explicit NestingScanner(llvm::StringRef source) : source(source) {}

  /// The offset of the first place whose nesting exceeds `limit`, if any.
  std::optional<size_t> findExcess(unsigned limit);

private:
  /// The identifier at `position` (letters, digits, `_`, `$`, `.`).
  llvm::StringRef identifierAt(size_t position) const {
    size_t end = position;
    while (end < source.size() && isIdentifierChar(source[end]))
      ++end;
    return source.slice(position, end);
  }

  /// Whether, after blanks from `position`, the source has `=`.
  bool equalsFollows(size_t position) const {
    size_t next = source.find_first_not_of(" \t", position);
    return next != llvm::StringRef::npos && source[next] == '=';
  }

  void open() { chains.push_back(0); }
  void close() {
    if (chains.size() == 1)
      return;
    chainSum -= chains.back();
    chains.pop_back();
  }
  void chainOperator() {
    ++chains.back();
    ++chainSum;
  }
  void endChain() {
    chainSum -= chains.back();
    chains.back() = 0;
  }

  llvm::StringRef source;
  /// Per open bracket (the first entry: none), the affine operators since
  /// its last separator.
  llvm::SmallVector<unsigned> chains = {0};
  unsigned chainSum = 0;
  /// The nesting of each alias defined so far.
  llvm::StringMap<unsigned> aliases;
  /// The alias being defined, until the next definition: what it holds
  /// nests up to `definedNesting`.
  llvm::StringRef defining;
  unsigned definedNesting = 0;
};

std::optional<size_t> NestingScanner::findExcess(unsigned limit) {
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    char next = i + 1 < source.size() ? source[i + 1] : '\0';
    unsigned referred = 0;
    if (c == '"') {
      // To the closing quote, past escapes.
      for (++i; i < source.size() && source[i] != '"'; ++i)
        i += source[i] == '\\';
      continue;
    }
    if (c == '/' && next == '/') {
      i = source.find('\n', i);
      if (i == llvm::StringRef::npos)
        break;
      continue;
    }
    switch (c) {
    case '(':
    case '[':
    case '{':
    case '<':
      open();
      break;
    case '>':
      // `->` and `>=` close nothing.
      if ((i > 0 && source[i - 1] == '-') || next == '=')
        break;
      [[fallthrough]];
    case ')':
    case ']':
    case '}':
      close();
      break;
    case '-':
      if (next != '>')
        chainOperator();
      break;
    case '+':
    case '*':
      chainOperator();
      break;
    case ',':
    case ':':
    case '=':
    case ';':
      endChain();
      break;
    case '#':
    case '!':
    case '%':
    case '@':
    case '^': {
      if (!isIdentifierStart(next))
        break;
      llvm::StringRef name = identifierAt(i + 1);
      size_t end = i + 1 + name.size();
      bool alias = c == '#' || c == '!';
      if (alias && chains.size() == 1 && !name.contains('.') &&
          equalsFollows(end)) {
        if (!defining.empty())
          aliases[defining] = definedNesting;
        defining = source.slice(i, end);
        definedNesting = 0;
      } else if (alias) {
        referred = aliases.lookup(source.slice(i, end));
      }
      i = end - 1;
      break;
    }
    default:
      if (!isIdentifierStart(c))
        break;
      llvm::StringRef word = identifierAt(i);
      if (word == "floordiv" || word == "ceildiv" || word == "mod")
        chainOperator();
      i += word.size() - 1;
      break;
    }
    unsigned nesting = (chains.size() - 1) + chainSum + referred;
    definedNesting = std::max(definedNesting, nesting);
    if (nesting > limit)
      return i;
  }
  return std::nullopt;
}
} // namespace

llvm::Error mlir::moe::checkSource(llvm::StringRef source,
                                   llvm::StringRef name) {
  if (source.size() > kMaxSourceBytes)
    return makeError(name + ": more than " + llvm::Twine(kMaxSourceBytes) +
                     " bytes, larger than any source the tools parse");
  std::optional<size_t> excess =
      NestingScanner(source).findExcess(kMaxSourceNesting);
  if (!excess)
    return llvm::Error::success();
  llvm::StringRef before = source.take_front(*excess);
  size_t line = before.count('\n') + 1;
  size_t column = *excess - (before.rfind('\n') + 1) + 1;
  return makeError(name + ":" + llvm::Twine(line) + ":" + llvm::Twine(column) +
                   ": error: nests deeper than " +
                   llvm::Twine(kMaxSourceNesting) +
                   " (brackets, affine operators and aliases counted "
                   "together), which a parser cannot take without "
                   "overflowing its stack");
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
mlir::moe::readSourceFile(llvm::StringRef path) {
  llvm::Expected<llvm::sys::fs::file_t> file =
      path == "-" ? llvm::sys::fs::getStdinHandle()
                  : llvm::sys::fs::openNativeFileForRead(path);
  if (!file)
    return makeError("cannot open input file '" + path +
                     "': " + llvm::toString(file.takeError()));
  // To the end, but no further than one chunk past the bound: a stream
  // (standard input, a pipe, a device) has no size to check first.
  constexpr size_t kChunk = size_t(1) << 16;
  std::string text;
  llvm::Error error = llvm::Error::success();
  while (text.size() <= kMaxSourceBytes) {
    size_t size = text.size();
    text.resize(size + kChunk);
    llvm::Expected<size_t> read = llvm::sys::fs::readNativeFile(
        *file, llvm::MutableArrayRef<char>(text.data() + size, kChunk));
    if (!read) {
      error = read.takeError();
      break;
    }
    text.resize(size + *read);
    if (*read == 0)
      break;
  }
  if (path != "-")
    llvm::sys::fs::closeFile(*file);
  if (error)
    return makeError("cannot read input file '" + path +
                     "': " + llvm::toString(std::move(error)));
  if (llvm::Error error = checkSource(text, path))
    return std::move(error);
  return llvm::MemoryBuffer::getMemBufferCopy(text, path);
}
