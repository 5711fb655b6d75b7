//===- SourceLimits.h - What the tools parse, bounded -----------*- C++ -*-===//
//
// MLIR's parser recurses once per nesting level of its input, on the stack
// of the thread that parses: 20,000 nested regions, or a few thousand
// nested brackets or unary minus signs, overflow 8 MiB and kill the process
// (the Python interpreter with it). Every entry point that parses text from
// outside (moe-opt, moe-compile and moe-run through parseLayerSource, the
// Python Module.parse) checks it here first, with a bound far above what
// real IR nests (about 10) and far below what overflows.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SUPPORT_SOURCELIMITS_H
#define MOE_SUPPORT_SOURCELIMITS_H

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>

namespace mlir {
namespace moe {

/// The deepest nesting a source may have, as checkSource counts it.
/// Each level costs the parser at most about 2.5 KiB of stack, so the bound
/// needs well under 1 MiB.
constexpr unsigned kMaxSourceNesting = 256;
/// The largest source the tools and the Python package parse (real layers
/// lower to a few MiB of IR).
constexpr uint64_t kMaxSourceBytes = uint64_t(256) << 20;

/// Fails, with a message, when MLIR text `source` (`name` in messages) is
/// larger than kMaxSourceBytes or may nest deeper than kMaxSourceNesting
/// (the message then "<name>:<line>:<column>: error: ..." at the place).
/// The nesting is an upper bound of the parser's recursion: outside string
/// literals and comments, the open brackets (`(`, `[`, `{`, `<`; the `>` of
/// `->` and `>=` closes none), plus at each open bracket the affine
/// operators since its last `,`, `:`, `=` or `;` (the parser recurses once
/// per `+`, `-`, `*`, `floordiv`, `ceildiv` and `mod` of a chain), plus the
/// nesting of an attribute or type alias referred to (a chain of aliases
/// nests IR without brackets, which the printer then walks recursively).
llvm::Error checkSource(llvm::StringRef source, llvm::StringRef name);

/// The file at `path` ("-": standard input), read whole and checked by
/// checkSource; reading stops past kMaxSourceBytes, so that a device such as
/// /dev/zero cannot exhaust memory.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readSourceFile(llvm::StringRef path);

} // namespace moe
} // namespace mlir

#endif // MOE_SUPPORT_SOURCELIMITS_H
