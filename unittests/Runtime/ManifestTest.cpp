//===- ManifestTest.cpp - Parsing and checking bundle manifests -----------===//
//
// Pins down what the runtime checks when it loads a bundle, short of the
// GPU (docs/BUNDLE.md, "What the runtime checks"): the magic and version,
// each statement's syntax and arity, names defined once and before use,
// element types, expressions, that a module file exists, format version
// 2's variants: names scoped to a variant, workspaces of one name sharing
// the largest allocation, bounds, and the variant a T selects, and format
// version 3's dependent launches and exchange buffers.
// Every error names the manifest line and the offending token. Also what a
// run checks against the device before it enqueues anything (launch sizes,
// shared memory, tensor map boxes), and that the files it reads are regular
// and bounded.
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"
#include "TempBundle.h"

#include <chrono>
#include <fcntl.h>
#include <future>

using namespace moe::runtime;

namespace {

/// The example of docs/BUNDLE.md, with a tensor map and a cluster launch.
const char *const kExample = R"(moe-bundle 1
target sm_90a
module kernels.cubin kernels.ptx
tokens-max 16384

# Tensors the caller passes, in this order: name, role, element type, dims.
tensor logits  input  f32 T 256
tensor bias    input  f32 256
tensor weights output f32 T 9
tensor ids     output i32 T 9

workspace counts i32 cdiv(T*9,1024) 257
zero counts
zero ids

tensormap logits_map logits f32 rank 2 dims 256 T strides 1024 box 64 128 swizzle 128 oob nan
launch moe_gate grid cdiv(T,4) 1 1 block 128 1 1 smem 0 args logits bias weights ids i32:T
launch moe_route_count grid cdiv(T*9,1024) 1 1 block 1024 1 1 smem 4096 args ids counts i32:T*9
launch moe_tma grid 2 1 1 block 128 1 1 smem 65536 cluster 2 1 1 args map:logits_map i64:T
)";

/// kExample up to its launches, for tests that append a statement.
std::string header() {
  std::string text = kExample;
  return text.substr(0, text.find("launch "));
}

/// The line number `header() + statement` gives `statement`.
int statementLine() {
  std::string text = header();
  return static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
}

/// The message of parsing `text`, which must fail.
std::string parseError(const std::string &text) {
  Manifest manifest;
  Status status = parseManifest(text, "manifest.txt", manifest);
  EXPECT_FALSE(status.ok()) << text;
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  return status.message();
}

/// The message of parsing the header followed by `statement`, which must
/// fail, less the "manifest.txt:<line>: " prefix, which it checks.
std::string statementError(const std::string &statement) {
  std::string message = parseError(header() + statement + "\n");
  std::string prefix = "manifest.txt:" + std::to_string(statementLine()) + ": ";
  EXPECT_EQ(message.substr(0, prefix.size()), prefix) << message;
  return message.substr(std::min(prefix.size(), message.size()));
}

TEST(Manifest, ParsesTheExample) {
  Manifest manifest;
  Status status = parseManifest(kExample, "manifest.txt", manifest);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(manifest.target, "sm_90a");
  EXPECT_EQ(manifest.computeMajor, 9);
  EXPECT_EQ(manifest.computeMinor, 0);
  EXPECT_EQ(manifest.cubin, "kernels.cubin");
  EXPECT_EQ(manifest.ptx, "kernels.ptx");
  EXPECT_EQ(manifest.tokensMax, 16384);

  ASSERT_EQ(manifest.tensors.size(), 4u);
  EXPECT_EQ(manifest.tensors[1].name, "bias");
  EXPECT_EQ(manifest.tensors[1].role, MOE_ROLE_INPUT);
  EXPECT_EQ(manifest.tensors[3].role, MOE_ROLE_OUTPUT);
  EXPECT_EQ(manifest.tensors[3].dtype, MOE_DTYPE_I32);
  int64_t dims[MOE_MAX_RANK];
  ASSERT_TRUE(evaluateDims(manifest.tensors[2], 5, dims).ok());
  EXPECT_EQ(dims[0], 5);
  EXPECT_EQ(dims[1], 9);

  // Version 1 is one variant, for every T up to tokens-max.
  EXPECT_EQ(manifest.version, 1);
  ASSERT_EQ(manifest.variants.size(), 1u);
  const Variant &plan = manifest.variants[0];
  EXPECT_EQ(plan.maxTokens, 16384);
  EXPECT_EQ(plan.line, 1);

  ASSERT_EQ(plan.workspaces.size(), 1u);
  EXPECT_EQ(manifest.workspaceNames, std::vector<std::string>{"counts"});
  EXPECT_EQ(plan.workspaces[0].allocation, 0);
  int64_t bytes = 0;
  ASSERT_TRUE(bufferBytes(plan.workspaces[0], 16384, bytes).ok());
  EXPECT_EQ(bytes, 144 * 257 * 4);
  ASSERT_EQ(plan.zeros.size(), 2u);
  EXPECT_TRUE(plan.zeros[0].isWorkspace);
  EXPECT_FALSE(plan.zeros[1].isWorkspace);
  EXPECT_EQ(plan.zeros[1].index, 3);

  ASSERT_EQ(plan.tensorMaps.size(), 1u);
  const TensorMapDecl &map = plan.tensorMaps[0];
  EXPECT_EQ(map.dims.size(), 2u);
  EXPECT_EQ(map.strides.size(), 1u);
  EXPECT_EQ(map.box[1].text(), "128");
  EXPECT_EQ(map.swizzleBytes, 128);
  EXPECT_TRUE(map.oobNan);

  ASSERT_EQ(plan.launches.size(), 3u);
  const LaunchDecl &gate = plan.launches[0];
  EXPECT_EQ(gate.kernel, "moe_gate");
  EXPECT_EQ(gate.line, 17);
  EXPECT_EQ(gate.grid[0].text(), "cdiv(T,4)");
  EXPECT_FALSE(gate.hasCluster);
  ASSERT_EQ(gate.args.size(), 5u);
  EXPECT_EQ(gate.args[2].kind, LaunchArg::Kind::Buffer);
  EXPECT_EQ(gate.args[2].buffer.index, 2);
  EXPECT_EQ(gate.args[4].kind, LaunchArg::Kind::I32);
  EXPECT_EQ(plan.launches[1].args[1].buffer.isWorkspace, true);
  const LaunchDecl &tma = plan.launches[2];
  EXPECT_TRUE(tma.hasCluster);
  EXPECT_EQ(tma.cluster[0].text(), "2");
  EXPECT_EQ(tma.args[0].kind, LaunchArg::Kind::TensorMap);
  EXPECT_EQ(tma.args[1].kind, LaunchArg::Kind::I64);
}

TEST(Manifest, CommentsBlankLinesAndCarriageReturns) {
  Manifest manifest;
  Status status = parseManifest(
      "# a bundle\n\n  moe-bundle 1   # magic\r\ntarget\tsm_80\r\n"
      "module k.cubin\ntokens-max 1\nlaunch k grid 1 1 1 block 1 1 1 smem 0 "
      "args",
      "m", manifest);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(manifest.computeMajor, 8);
  EXPECT_TRUE(manifest.ptx.empty());
  ASSERT_EQ(manifest.variants[0].launches.size(), 1u);
  EXPECT_EQ(manifest.variants[0].launches[0].line, 7);
  EXPECT_TRUE(manifest.variants[0].launches[0].args.empty());
}

TEST(Manifest, MagicAndVersion) {
  EXPECT_EQ(parseError(""),
            "manifest.txt: missing 'moe-bundle <version>' statement");
  EXPECT_EQ(parseError("# only a comment\n"),
            "manifest.txt: missing 'moe-bundle <version>' statement");
  EXPECT_EQ(parseError("\ntarget sm_90a\nmoe-bundle 1\n"),
            "manifest.txt:2: expected 'moe-bundle <version>' as the first "
            "statement, got 'target'");
  EXPECT_EQ(parseError("moe-bundel 1\n"),
            "manifest.txt:1: expected 'moe-bundle <version>' as the first "
            "statement, got 'moe-bundel'");
  for (const char *version : {"0", "4", "01", "1.0", "v2", "3a"})
    EXPECT_EQ(parseError(std::string("moe-bundle ") + version + "\n"),
              std::string("manifest.txt:1: unsupported bundle format version "
                          "'") +
                  version +
                  "'; this runtime reads versions 1 to 3: recompile the "
                  "bundle with moe-compile");
  EXPECT_EQ(parseError("moe-bundle\n"),
            "manifest.txt:1: wrong number of operands; expected 'moe-bundle "
            "<version>'");
  EXPECT_EQ(statementError("moe-bundle 1"),
            "'moe-bundle' must be the first statement, and only once");
}

TEST(Manifest, RequiredStatements) {
  EXPECT_EQ(parseError("moe-bundle 1\nmodule k.cubin\ntokens-max 4\n"),
            "manifest.txt: missing 'target' statement");
  EXPECT_EQ(parseError("moe-bundle 1\ntarget sm_90a\ntokens-max 4\n"),
            "manifest.txt: missing 'module' statement");
  EXPECT_EQ(parseError("moe-bundle 1\ntarget sm_90a\nmodule k.cubin\n"),
            "manifest.txt: missing 'tokens-max' statement");
  EXPECT_EQ(statementError("target sm_80"),
            "duplicate 'target' statement (first on line 2)");
  EXPECT_EQ(statementError("module a.cubin"),
            "duplicate 'module' statement (first on line 3)");
  EXPECT_EQ(statementError("tokens-max 8"),
            "duplicate 'tokens-max' statement (first on line 4)");
}

TEST(Manifest, UnknownStatement) {
  EXPECT_EQ(statementError("lanch moe_gate grid 1 1 1"),
            "unknown statement 'lanch'");
  EXPECT_EQ(statementError("Tensor x input f32"), "unknown statement 'Tensor'");
}

TEST(Manifest, Targets) {
  struct Case {
    const char *target;
    int major, minor;
  };
  for (Case good :
       {Case{"sm_90a", 9, 0}, Case{"sm_90", 9, 0}, Case{"sm_80", 8, 0},
        Case{"sm_86", 8, 6}, Case{"sm_100a", 10, 0}, Case{"sm_120f", 12, 0}}) {
    Manifest manifest;
    std::string text = std::string("moe-bundle 1\ntarget ") + good.target +
                       "\nmodule k.cubin\ntokens-max 1\n";
    ASSERT_TRUE(parseManifest(text, "m", manifest).ok()) << good.target;
    EXPECT_EQ(manifest.computeMajor, good.major) << good.target;
    EXPECT_EQ(manifest.computeMinor, good.minor) << good.target;
  }
  for (const char *bad :
       {"sm90", "sm_9", "sm_90b", "sm_", "gfx90a", "sm_90aa", "sm_a90"})
    EXPECT_EQ(parseError(std::string("moe-bundle 1\ntarget ") + bad + "\n"),
              std::string("manifest.txt:2: bad target '") + bad +
                  "'; expected e.g. sm_90a");
}

TEST(Manifest, Arity) {
  const char *const wrong = "wrong number of operands; expected ";
  EXPECT_EQ(statementError("target"), std::string(wrong) + "'target <arch>'");
  EXPECT_EQ(statementError("module"),
            std::string(wrong) + "'module <cubin> [<ptx>]'");
  EXPECT_EQ(statementError("module a b c"),
            std::string(wrong) + "'module <cubin> [<ptx>]'");
  EXPECT_EQ(statementError("tokens-max 1 2"),
            std::string(wrong) + "'tokens-max <int>'");
  EXPECT_EQ(statementError("tensor x input"),
            std::string(wrong) +
                "'tensor <name> input|output <dtype> <dim>... (0 to 4 dims)'");
  EXPECT_EQ(statementError("tensor x input f32 1 2 3 4 5"),
            std::string(wrong) +
                "'tensor <name> input|output <dtype> <dim>... (0 to 4 dims)'");
  EXPECT_EQ(statementError("workspace w i32 1 2 3 4 5"),
            std::string(wrong) +
                "'workspace <name> <dtype> <dim>... (0 to 4 dims)'");
  EXPECT_EQ(statementError("zero"), std::string(wrong) + "'zero <name>'");
  EXPECT_EQ(statementError("zero counts ids"),
            std::string(wrong) + "'zero <name>'");
  EXPECT_EQ(statementError("launch"),
            std::string(wrong) +
                "'launch <kernel> grid <x> <y> <z> block <x> <y> <z> smem "
                "<bytes> [cluster <x> <y> <z>] [dependent] args <arg>...'");
}

TEST(Manifest, LaunchSyntax) {
  EXPECT_EQ(statementError("launch k grid 1 1"),
            "expected 3 values after 'grid'");
  EXPECT_EQ(statementError("launch k grid 1 1 1 smem 0 args"),
            "expected 'block', got 'smem'");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0"),
            "expected 'args' at the end of the line");
  EXPECT_EQ(
      statementError("launch k grid 1 1 1 block 1 1 1 smem 0 cluster 2 "
                     "1 args"),
      "bad cluster value: expected an integer, 'T', 'cdiv(', 'max(', 'min(' or "
      "'(' at column 1 of 'args'");
  EXPECT_EQ(statementError("launch k block 1 1 1 grid 1 1 1 smem 0 args"),
            "expected 'grid', got 'block'");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args f32:1"),
            "bad argument 'f32:1'; expected a name, i32:<expr>, i64:<expr>, "
            "map:<name> or peers:<tensor>");
}

TEST(Manifest, TensorMapSyntax) {
  const std::string map = "tensormap m logits bf16 ";
  Manifest manifest;
  ASSERT_TRUE(
      parseManifest(header() + map + "rank 1 dims T strides box 64 swizzle 0\n",
                    "manifest.txt", manifest)
          .ok());
  EXPECT_FALSE(manifest.variants[0].tensorMaps.back().oobNan);
  EXPECT_TRUE(manifest.variants[0].tensorMaps.back().strides.empty());
  EXPECT_EQ(statementError(map + "rank 0 dims strides box swizzle 0"),
            "bad tensor map rank; expected 1 to 5");
  EXPECT_EQ(statementError(map + "rank 6"),
            "bad tensor map rank; expected 1 to 5");
  EXPECT_EQ(
      statementError(map + "rank 2 dims 1 2 strides box 1 1 swizzle 0"),
      "bad strides value: expected an integer, 'T', 'cdiv(', 'max(', 'min(' or "
      "'(' at column 1 of 'box'");
  EXPECT_EQ(statementError(map + "rank 2 dims 1"),
            "expected 2 values after 'dims'");
  EXPECT_EQ(statementError(map + "rank 2 dims 1 2 strides 4 box 1 1"),
            "expected 'swizzle' at the end of the line");
  EXPECT_EQ(statementError(map + "rank 1 dims 1 strides box 1 swizzle 16"),
            "bad swizzle; expected 0, 32, 64 or 128");
  EXPECT_EQ(
      statementError(map + "rank 1 dims 1 strides box 1 swizzle 0 oob inf"),
      "bad oob fill; expected zero or nan");
  EXPECT_EQ(
      statementError(map + "rank 1 dims 1 strides box 1 swizzle 0 oob zero x"),
      "unexpected 'x' after the tensor map");
  EXPECT_EQ(statementError("tensormap m logits"),
            "wrong number of operands; expected 'tensormap <name> <tensor> "
            "<dtype> rank <r> dims <d>... strides <s>... box <b>... swizzle "
            "<bytes> [oob zero|nan]'");
}

TEST(Manifest, NamesAreDefinedOnce) {
  EXPECT_EQ(statementError("tensor bias input f32 4"),
            "'bias' is already defined on line 8");
  EXPECT_EQ(statementError("workspace logits u8 4"),
            "'logits' is already defined on line 7");
  EXPECT_EQ(statementError("tensormap counts logits f32 rank 1 dims 1 "
                           "strides box 1 swizzle 0"),
            "'counts' is already defined on line 12");
  EXPECT_EQ(statementError("tensor 1x input f32 4"),
            "bad name '1x'; names match [A-Za-z_][A-Za-z0-9_]*");
  EXPECT_EQ(statementError("workspace a-b u8 4"),
            "bad name 'a-b'; names match [A-Za-z_][A-Za-z0-9_]*");
}

TEST(Manifest, NamesAreDefinedBeforeUse) {
  EXPECT_EQ(parseError("moe-bundle 1\nzero w\nworkspace w u8 4\n"),
            "manifest.txt:2: 'w' is not a tensor or workspace defined above");
  EXPECT_EQ(statementError("zero nothing"),
            "'nothing' is not a tensor or workspace defined above");
  EXPECT_EQ(statementError("zero logits_map"),
            "'logits_map' is not a tensor or workspace defined above");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args "
                           "logits nothing"),
            "'nothing' is not a tensor or workspace defined above");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args "
                           "logits_map"),
            "'logits_map' is not a tensor or workspace defined above");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args "
                           "map:logits"),
            "'logits' is not a tensor map defined above");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args "
                           "map:nothing"),
            "'nothing' is not a tensor map defined above");
  EXPECT_EQ(statementError("tensormap m nothing f32 rank 1 dims 1 strides "
                           "box 1 swizzle 0"),
            "'nothing' is not a tensor or workspace defined above");
}

TEST(Manifest, ZeroOnlyWhatTheKernelsWrite) {
  EXPECT_EQ(statementError("zero bias"), "cannot zero input tensor 'bias'");
}

TEST(Manifest, RolesAndElementTypes) {
  EXPECT_EQ(statementError("tensor x inout f32 4"),
            "unknown role 'inout'; expected input or output");
  EXPECT_EQ(statementError("tensor x input f64 4"),
            "unknown element type 'f64'; expected f32, bf16, f16, i32, i64, u8 "
            "or f8e4m3");
  EXPECT_EQ(statementError("workspace x F32 4"),
            "unknown element type 'F32'; expected f32, bf16, f16, i32, i64, u8 "
            "or f8e4m3");
  EXPECT_EQ(statementError("tensormap m logits fp8 rank 1 dims 1 strides box "
                           "1 swizzle 0"),
            "unknown element type 'fp8'; expected f32, bf16, f16, i32, i64, u8 "
            "or f8e4m3");
  Manifest manifest;
  ASSERT_TRUE(parseManifest(header() +
                                "tensor a input bf16\ntensor b input f16 1\n"
                                "tensor c input i64 1\nworkspace d u8 1\n"
                                "tensor e input f8e4m3 2\n",
                            "manifest.txt", manifest)
                  .ok());
  EXPECT_EQ(manifest.tensors[4].dtype, MOE_DTYPE_BF16);
  EXPECT_TRUE(manifest.tensors[4].dims.empty());
  EXPECT_EQ(manifest.tensors[5].dtype, MOE_DTYPE_F16);
  EXPECT_EQ(manifest.tensors[6].dtype, MOE_DTYPE_I64);
  EXPECT_EQ(manifest.variants[0].workspaces[1].dtype, MOE_DTYPE_U8);
  EXPECT_EQ(manifest.tensors[7].dtype, MOE_DTYPE_F8E4M3);
  EXPECT_EQ(dtypeBytes(MOE_DTYPE_F8E4M3), 1);
}

TEST(Manifest, BadExpressions) {
  EXPECT_EQ(statementError("tensor x input f32 T cdiv(T,4"),
            "bad dim 1 of 'x': expected ')' at column 9 of 'cdiv(T,4'");
  EXPECT_EQ(statementError("launch k grid T/2 1 1 block 1 1 1 smem 0 args"),
            "bad grid value: unexpected '/' at column 2 of 'T/2'");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 1k args"),
            "bad smem value: unexpected 'k' at column 2 of '1k'");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args "
                           "i32:T+"),
            "bad argument 'i32:T+': expected an integer, 'T', 'cdiv(', "
            "'max(', 'min(' or '(' at column 3 of 'T+'");
  EXPECT_EQ(statementError("launch k grid 1 1 1 block 1 1 1 smem 0 args i64:"),
            "bad argument 'i64:': expected an integer, 'T', 'cdiv(', 'max(', "
            "'min(' or '(' at column 1 of ''");
  EXPECT_EQ(statementError("tensormap m logits f32 rank 1 dims 1 strides box "
                           "max(1) swizzle 0"),
            "bad box value: expected ',' at column 6 of 'max(1)'");
}

TEST(Manifest, TokensMax) {
  for (const char *bad : {"0", "-1", "many", "1e3", "99999999999999999999"})
    EXPECT_EQ(parseError(std::string("moe-bundle 1\ntokens-max ") + bad),
              std::string("manifest.txt:2: bad tokens-max '") + bad +
                  "'; expected a positive integer");
}

TEST(Manifest, DimsAtT) {
  Manifest manifest;
  ASSERT_TRUE(parseManifest(header() + "tensor x input f32 T-5 4\n"
                                       "workspace huge u8 T*T*T*T\n",
                            "manifest.txt", manifest)
                  .ok());
  int64_t dims[MOE_MAX_RANK];
  Status status = evaluateDims(manifest.tensors[4], 2, dims);
  EXPECT_EQ(status.message(), "dim 0 of 'x' is -3 at T=2");
  int64_t bytes = 0;
  const BufferDecl &huge = manifest.variants[0].workspaces[1];
  status = bufferBytes(huge, 16384, bytes);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(bytes, int64_t(1) << 56);
  status = bufferBytes(huge, 1 << 16, bytes);
  EXPECT_EQ(status.message(), "'T*T*T*T' overflows 64 bits at T=65536");
}

//===----------------------------------------------------------------------===//
// Format version 2: variants
//===----------------------------------------------------------------------===//

/// A version 2 manifest with three variants: `counts` in the first two (a
/// shared allocation, larger in the second), `scratch` only in the first,
/// a tensor map of one name in the first two, `partials` only in the last.
const char *const kVariants = R"(moe-bundle 2
target sm_90a
module kernels.cubin
tokens-max 16384
tensor logits input  f32 T 256
tensor ids    output i32 T 9

variant 1
workspace counts i32 T*9+1984
workspace scratch u8 64
tensormap logits_map logits f32 rank 2 dims 256 T strides 1024 box 64 1 swizzle 0
zero counts
launch gate_v1 grid 1 1 1 block 128 1 1 smem 0 args logits ids counts scratch map:logits_map
variant 16
workspace counts i32 T*9+4096
tensormap logits_map logits f32 rank 2 dims 256 T strides 1024 box 64 16 swizzle 128
launch gate_v16 grid cdiv(T,16) 1 1 block 128 1 1 smem 0 args logits ids counts map:logits_map
variant 16384
workspace partials f32 T 8
zero ids
launch gate grid cdiv(T,64) 1 1 block 128 1 1 smem 0 args logits ids partials
launch sum grid cdiv(T,64) 1 1 block 128 1 1 smem 0 args partials ids
)";

/// Globals of a version 2 manifest, lines 1 to 6, for tests that append
/// variants from line 7 on.
const char *const kGlobals = "moe-bundle 2\ntarget sm_90a\nmodule k.cubin\n"
                             "tokens-max 64\ntensor x input f32 T 4\n"
                             "tensor y output f32 T 4\n";

/// A launch that any variant of kGlobals may hold.
const char *const kLaunch = "launch k grid 1 1 1 block 1 1 1 smem 0 args x y\n";

/// The variant of `manifest` that serves `tokens`; -1 when none does.
int variantFor(const Manifest &manifest, int64_t tokens) {
  int index = -1;
  Status status = selectVariant(manifest, tokens, index);
  return status.ok() ? index : -1;
}

TEST(Variants, ParsesTheExample) {
  Manifest manifest;
  Status status = parseManifest(kVariants, "manifest.txt", manifest);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(manifest.version, 2);
  EXPECT_EQ(manifest.tokensMax, 16384);
  ASSERT_EQ(manifest.tensors.size(), 2u);
  ASSERT_EQ(manifest.variants.size(), 3u);
  const Variant &one = manifest.variants[0], &sixteen = manifest.variants[1],
                &all = manifest.variants[2];
  EXPECT_EQ(one.maxTokens, 1);
  EXPECT_EQ(one.line, 8);
  EXPECT_EQ(sixteen.maxTokens, 16);
  EXPECT_EQ(sixteen.line, 14);
  EXPECT_EQ(all.maxTokens, 16384);
  EXPECT_EQ(all.line, 18);

  // Each variant's statements are its own.
  ASSERT_EQ(one.launches.size(), 1u);
  EXPECT_EQ(one.launches[0].kernel, "gate_v1");
  ASSERT_EQ(sixteen.launches.size(), 1u);
  EXPECT_EQ(sixteen.launches[0].kernel, "gate_v16");
  ASSERT_EQ(all.launches.size(), 2u);
  EXPECT_EQ(all.launches[1].kernel, "sum");
  ASSERT_EQ(one.zeros.size(), 1u);
  EXPECT_TRUE(one.zeros[0].isWorkspace);
  EXPECT_TRUE(sixteen.zeros.empty());
  ASSERT_EQ(all.zeros.size(), 1u);
  EXPECT_FALSE(all.zeros[0].isWorkspace);
  EXPECT_EQ(all.zeros[0].index, 1);
}

TEST(Variants, NamesAreScopedToTheirVariant) {
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kVariants, "manifest.txt", manifest).ok());
  const Variant &one = manifest.variants[0], &sixteen = manifest.variants[1],
                &all = manifest.variants[2];
  // A tensor map of one name in two variants: each launch gets its own.
  ASSERT_EQ(one.tensorMaps.size(), 1u);
  ASSERT_EQ(sixteen.tensorMaps.size(), 1u);
  EXPECT_EQ(one.tensorMaps[0].box[1].text(), "1");
  EXPECT_EQ(sixteen.tensorMaps[0].box[1].text(), "16");
  EXPECT_EQ(sixteen.launches[0].args[3].kind, LaunchArg::Kind::TensorMap);
  EXPECT_EQ(sixteen.launches[0].args[3].tensorMap, 0);

  // Launch arguments name the tensors and the variant's own workspaces.
  const std::vector<LaunchArg> &args = all.launches[0].args;
  EXPECT_FALSE(args[1].buffer.isWorkspace);
  EXPECT_EQ(args[1].buffer.index, 1);
  EXPECT_TRUE(args[2].buffer.isWorkspace);
  EXPECT_EQ(args[2].buffer.index, 0);
  EXPECT_EQ(all.workspaces[0].name, "partials");

  // A name of another variant is not visible.
  std::string text = kGlobals;
  EXPECT_EQ(parseError(text + "variant 1\nworkspace w u8 4\n" + kLaunch +
                       "variant 64\nzero w\n"),
            "manifest.txt:11: 'w' is not a tensor or workspace defined above");
  EXPECT_EQ(parseError(text +
                       "variant 1\ntensormap m x f32 rank 1 dims 4 strides "
                       "box 4 swizzle 0\n" +
                       kLaunch +
                       "variant 64\nlaunch k grid 1 1 1 block 1 1 1 smem 0 "
                       "args map:m\n"),
            "manifest.txt:11: 'm' is not a tensor map defined above");
}

TEST(Variants, WorkspacesOfOneNameShareTheLargestAllocation) {
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kVariants, "manifest.txt", manifest).ok());
  EXPECT_EQ(manifest.workspaceNames,
            (std::vector<std::string>{"counts", "scratch", "partials"}));
  EXPECT_EQ(manifest.variants[0].workspaces[0].allocation, 0);
  EXPECT_EQ(manifest.variants[0].workspaces[1].allocation, 1);
  EXPECT_EQ(manifest.variants[1].workspaces[0].allocation, 0);
  EXPECT_EQ(manifest.variants[2].workspaces[0].allocation, 2);
  // Each at T = tokens-max, whatever the variant's bound.
  std::vector<int64_t> bytes;
  ASSERT_TRUE(workspaceAllocationBytes(manifest, bytes).ok());
  EXPECT_EQ(bytes,
            (std::vector<int64_t>{(16384 * 9 + 4096) * 4, 64, 16384 * 8 * 4}));

  // The larger declaration first: still the largest.
  std::string text = kGlobals;
  ASSERT_TRUE(parseManifest(text + "variant 1\nworkspace w i32 T*100\n" +
                                kLaunch + "variant 64\nworkspace w i32 T\n" +
                                kLaunch,
                            "manifest.txt", manifest)
                  .ok());
  ASSERT_TRUE(workspaceAllocationBytes(manifest, bytes).ok());
  EXPECT_EQ(bytes, std::vector<int64_t>{64 * 100 * 4});
  ASSERT_TRUE(parseManifest(text +
                                "variant 64\nworkspace w u8 T*T*T*T*T*T*T*"
                                "T*T*T*T\n" +
                                kLaunch,
                            "manifest.txt", manifest)
                  .ok());
  EXPECT_EQ(workspaceAllocationBytes(manifest, bytes).message(),
            "'T*T*T*T*T*T*T*T*T*T*T' overflows 64 bits at T=64");
}

TEST(Variants, WorkspacesOfOneNameHaveOneElementType) {
  std::string text = kGlobals;
  EXPECT_EQ(parseError(text + "variant 1\nworkspace w i32 T\n" + kLaunch +
                       "variant 64\nworkspace w f32 T\n"),
            "manifest.txt:11: workspace 'w' is f32 here but i32 on line 8; "
            "the workspaces of one name share an allocation and need one "
            "element type");
}

TEST(Variants, NamesAreDefinedOncePerVariant) {
  std::string text = kGlobals;
  // A tensor is seen by every variant and may not be shadowed.
  EXPECT_EQ(parseError(text + "variant 64\nworkspace x f32 T 4\n"),
            "manifest.txt:8: 'x' is already defined on line 5");
  EXPECT_EQ(parseError(text + "variant 64\ntensormap y y f32 rank 1 dims 4 "
                              "strides box 4 swizzle 0\n"),
            "manifest.txt:8: 'y' is already defined on line 6");
  EXPECT_EQ(parseError(text + "variant 64\nworkspace w u8 4\nworkspace w u8 "
                              "4\n"),
            "manifest.txt:9: 'w' is already defined on line 8");
  EXPECT_EQ(parseError(text + "variant 64\nworkspace w u8 4\ntensormap w x "
                              "f32 rank 1 dims 4 strides box 4 swizzle 0\n"),
            "manifest.txt:9: 'w' is already defined on line 8");
}

TEST(Variants, StatementsBelongBeforeOrInAVariant) {
  std::string text = kGlobals;
  for (const char *statement :
       {"workspace w u8 4", "zero y",
        "tensormap m x f32 rank 1 dims 4 strides box 4 swizzle 0",
        "launch k grid 1 1 1 block 1 1 1 smem 0 args"}) {
    std::string keyword =
        std::string(statement).substr(0, std::string(statement).find(' '));
    EXPECT_EQ(parseError(text + statement + "\n"),
              "manifest.txt:7: '" + keyword + "' must follow a 'variant' line");
  }
  for (const char *statement : {"tensor z input f32 4", "target sm_90a",
                                "module k.cubin", "tokens-max 64"}) {
    std::string keyword =
        std::string(statement).substr(0, std::string(statement).find(' '));
    EXPECT_EQ(parseError(text + "variant 64\n" + kLaunch + statement + "\n"),
              "manifest.txt:9: '" + keyword +
                  "' must come before the first 'variant' line");
  }
  EXPECT_EQ(parseError(header() + "variant 16384\n"),
            "manifest.txt:" + std::to_string(statementLine()) +
                ": 'variant' needs bundle format version 2 ('moe-bundle 2')");
}

TEST(Variants, Bounds) {
  std::string text = kGlobals;
  for (const char *bad : {"0", "-1", "many", "1e3", "99999999999999999999"})
    EXPECT_EQ(parseError(text + "variant " + bad + "\n"),
              std::string("manifest.txt:7: bad variant bound '") + bad +
                  "'; expected a positive integer");
  EXPECT_EQ(parseError(text + "variant\n"),
            "manifest.txt:7: wrong number of operands; expected 'variant "
            "<max-tokens>'");
  EXPECT_EQ(parseError(text + "variant 1 64\n"),
            "manifest.txt:7: wrong number of operands; expected 'variant "
            "<max-tokens>'");
  EXPECT_EQ(parseError(text + "variant 16\n" + kLaunch + "variant 16\n"),
            "manifest.txt:9: variant bound 16 is not above the previous one, "
            "16 on line 7; bounds increase strictly");
  EXPECT_EQ(parseError(text + "variant 16\n" + kLaunch + "variant 8\n"),
            "manifest.txt:9: variant bound 8 is not above the previous one, "
            "16 on line 7; bounds increase strictly");
}

TEST(Variants, TheLastBoundIsTokensMax) {
  std::string text = kGlobals;
  EXPECT_EQ(
      parseError(text + "variant 1\n" + kLaunch + "variant 32\n" + kLaunch),
      "manifest.txt:9: the last variant's bound, 32, is not "
      "tokens-max, 64");
  EXPECT_EQ(parseError(text + "variant 128\n" + kLaunch),
            "manifest.txt:7: the last variant's bound, 128, is not "
            "tokens-max, 64");
  EXPECT_EQ(parseError(text), "manifest.txt: missing 'variant' statement");
}

TEST(Variants, EveryVariantLaunches) {
  std::string text = kGlobals;
  EXPECT_EQ(
      parseError(text + "variant 1\nworkspace w u8 4\nvariant 64\n" + kLaunch),
      "manifest.txt:7: variant 1 has no launch");
  EXPECT_EQ(parseError(text + "variant 1\n" + kLaunch + "variant 64\nzero y\n"),
            "manifest.txt:9: variant 64 has no launch");
}

TEST(Variants, SelectionByTokens) {
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kVariants, "manifest.txt", manifest).ok());
  // At every bound, and between bounds.
  EXPECT_EQ(variantFor(manifest, 1), 0);
  EXPECT_EQ(variantFor(manifest, 2), 1);
  EXPECT_EQ(variantFor(manifest, 15), 1);
  EXPECT_EQ(variantFor(manifest, 16), 1);
  EXPECT_EQ(variantFor(manifest, 17), 2);
  EXPECT_EQ(variantFor(manifest, 1000), 2);
  EXPECT_EQ(variantFor(manifest, 16384), 2);
  int index = 7;
  Status status = selectVariant(manifest, 16385, index);
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(status.message(), "T=16385 is outside [1, 16384]");
  EXPECT_EQ(selectVariant(manifest, 0, index).message(),
            "T=0 is outside [1, 16384]");
  EXPECT_EQ(index, 7);

  // Version 1: one variant, for every T.
  ASSERT_TRUE(parseManifest(kExample, "manifest.txt", manifest).ok());
  for (int64_t tokens : {1, 2, 16383, 16384})
    EXPECT_EQ(variantFor(manifest, tokens), 0) << tokens;
  EXPECT_EQ(variantFor(manifest, 16385), -1);
}

//===----------------------------------------------------------------------===//

/// kGlobals as format version 3, whose launches may be `dependent`.
std::string version3Globals() {
  return "moe-bundle 3" + std::string(kGlobals).substr(12);
}

TEST(DependentLaunches, ParsesTheFlag) {
  Manifest manifest;
  std::string text =
      version3Globals() +
      "variant 64\n"
      "launch a grid 1 1 1 block 1 1 1 smem 0 dependent args x y\n"
      "launch b grid 2 1 1 block 1 1 1 smem 0 cluster 2 1 1 dependent args y\n"
      "launch c grid 1 1 1 block 1 1 1 smem 0 args y\n";
  Status status = parseManifest(text, "manifest.txt", manifest);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(manifest.version, 3);
  const std::vector<LaunchDecl> &launches = manifest.variants[0].launches;
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_TRUE(launches[0].dependent);
  EXPECT_EQ(launches[0].args.size(), 2u);
  EXPECT_TRUE(launches[1].dependent);
  EXPECT_TRUE(launches[1].hasCluster);
  EXPECT_EQ(launches[1].args.size(), 1u);
  EXPECT_FALSE(launches[2].dependent);
}

TEST(DependentLaunches, OlderVersionsLaunchPlainly) {
  // Versions 1 and 2 have no dependent launch and cannot name one.
  Manifest manifest;
  for (const char *text : {kVariants, kExample}) {
    ASSERT_TRUE(parseManifest(text, "manifest.txt", manifest).ok());
    for (const Variant &variant : manifest.variants)
      for (const LaunchDecl &launch : variant.launches)
        EXPECT_FALSE(launch.dependent) << launch.kernel;
  }
  const char *dependent =
      "launch k grid 1 1 1 block 1 1 1 smem 0 dependent args x\n";
  EXPECT_EQ(parseError(std::string(kGlobals) + "variant 64\n" + dependent),
            "manifest.txt:8: 'dependent' needs bundle format version 3 "
            "('moe-bundle 3')");
  EXPECT_EQ(parseError(header() + dependent),
            "manifest.txt:" + std::to_string(statementLine()) +
                ": 'dependent' needs bundle format version 3 ('moe-bundle "
                "3')");
}

TEST(DependentLaunches, TheFlagStandsBeforeTheArguments) {
  std::string variant = version3Globals() + "variant 64\n";
  const char *launch = "launch k grid 1 1 1 block 1 1 1 smem 0 ";
  EXPECT_EQ(parseError(variant + launch + "dependent cluster 2 1 1 args x\n"),
            "manifest.txt:8: expected 'args', got 'cluster'");
  EXPECT_EQ(parseError(variant + launch + "dependent dependent args x\n"),
            "manifest.txt:8: expected 'args', got 'dependent'");
  EXPECT_EQ(parseError(variant + launch + "args x dependent\n"),
            "manifest.txt:8: 'dependent' is not a tensor or workspace "
            "defined above");
}

TEST(ExchangeBuffers, ParsesTheStatementAndPeerTables) {
  Manifest manifest;
  std::string text = version3Globals() +
                     "exchange y world 4 rank 3\n"
                     "variant 64\n"
                     "launch k grid 1 1 1 block 1 1 1 smem 0 args x peers:y\n";
  Status status = parseManifest(text, "manifest.txt", manifest);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(manifest.tensors[0].world, 0);
  EXPECT_EQ(manifest.tensors[1].world, 4);
  EXPECT_EQ(manifest.tensors[1].rank, 3);
  const LaunchArg &peers = manifest.variants[0].launches[0].args[1];
  EXPECT_EQ(peers.kind, LaunchArg::Kind::Peers);
  EXPECT_FALSE(peers.buffer.isWorkspace);
  EXPECT_EQ(peers.buffer.index, 1);
}

TEST(ExchangeBuffers, Errors) {
  auto exchangeError = [](const std::string &statements) {
    return parseError(version3Globals() + statements);
  };
  EXPECT_EQ(exchangeError("exchange y world 2\n"),
            "manifest.txt:7: wrong number of operands; expected 'exchange "
            "<tensor> world <int> rank <int>'");
  EXPECT_EQ(exchangeError("exchange z world 2 rank 0\n"),
            "manifest.txt:7: 'z' is not a tensor defined above");
  EXPECT_EQ(exchangeError("exchange y world 0 rank 0\n"),
            "manifest.txt:7: bad world '0'; expected an integer in [1, 65536]");
  EXPECT_EQ(exchangeError("exchange y world 2 rank 2\n"),
            "manifest.txt:7: bad rank '2'; expected an integer in [0, 2)");
  EXPECT_EQ(exchangeError("exchange y world 2 rank 0\nexchange y world 2 "
                          "rank 1\n"),
            "manifest.txt:8: duplicate 'exchange' of tensor 'y'");
  EXPECT_EQ(exchangeError("variant 64\nexchange y world 2 rank 0\n"),
            "manifest.txt:8: 'exchange' must come before the first 'variant' "
            "line");
  EXPECT_EQ(exchangeError("variant 64\nworkspace w i32 4\n"
                          "launch k grid 1 1 1 block 1 1 1 smem 0 args "
                          "peers:x\n"),
            "manifest.txt:9: 'peers:x' names 'x', which is no tensor with an "
            "'exchange' statement: only an exchange buffer has a table of its "
            "ranks' slices");
  EXPECT_EQ(exchangeError("variant 64\nworkspace w i32 4\n"
                          "launch k grid 1 1 1 block 1 1 1 smem 0 args "
                          "peers:w\n"),
            "manifest.txt:9: 'peers:w' names 'w', which is no tensor with an "
            "'exchange' statement: only an exchange buffer has a table of its "
            "ranks' slices");
  EXPECT_EQ(parseError(std::string(kGlobals) + "exchange y world 2 rank 0\n"),
            "manifest.txt:7: 'exchange' needs bundle format version 3 "
            "('moe-bundle 3')");
}

TEST(Manifest, LoadChecksTheFiles) {
  TempBundle bundle;
  Manifest manifest;
  Status status = loadManifest(bundle.path, manifest);
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  EXPECT_EQ(status.message(), "cannot open " + bundle.path +
                                  "/manifest.txt: No such file or directory");

  std::string text = kExample;
  bundle.write("manifest.txt", text);
  status = loadManifest(bundle.path, manifest);
  EXPECT_EQ(status.message(), bundle.path +
                                  "/manifest.txt: neither kernels.cubin nor "
                                  "kernels.ptx exists in " +
                                  bundle.path);

  bundle.write("kernels.ptx", ".version 8.0\n");
  status = loadManifest(bundle.path, manifest);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(manifest.cubin, "");
  EXPECT_EQ(manifest.ptx, "kernels.ptx");

  bundle.write("kernels.cubin", "\x7f"
                                "ELF");
  ASSERT_TRUE(loadManifest(bundle.path, manifest).ok());
  EXPECT_EQ(manifest.cubin, "kernels.cubin");
  EXPECT_EQ(manifest.ptx, "kernels.ptx");

  text.replace(text.find("kernels.cubin kernels.ptx"), 25, "other.cubin");
  bundle.write("manifest.txt", text);
  status = loadManifest(bundle.path, manifest);
  EXPECT_EQ(status.message(), bundle.path +
                                  "/manifest.txt: other.cubin does not exist "
                                  "in " +
                                  bundle.path);

  bundle.write("manifest.txt", "moe-bundle 4\n");
  status = loadManifest(bundle.path, manifest);
  EXPECT_EQ(status.message(),
            bundle.path + "/manifest.txt:1: unsupported bundle format version "
                          "'4'; this runtime reads versions 1 to 3: "
                          "recompile the bundle with moe-compile");
}

/// An H100's limits.
DeviceLimits h100Limits() {
  DeviceLimits limits;
  limits.maxGrid[0] = 2147483647;
  limits.maxGrid[1] = limits.maxGrid[2] = 65535;
  limits.maxBlock[0] = limits.maxBlock[1] = 1024;
  limits.maxBlock[2] = 64;
  limits.maxThreadsPerBlock = 1024;
  limits.maxSharedPerBlock = 232448;
  return limits;
}

TEST(Limits, LaunchesWithinTheDevicesLimits) {
  DeviceLimits device = h100Limits();
  KernelLimits kernel{1024, 1024};
  unsigned grid[3] = {2147483647u, 65535, 65535}, block[3] = {1024, 1, 1};
  unsigned cluster[3] = {1, 5, 3};
  EXPECT_TRUE(checkLaunchLimits(device, kernel, grid, block, cluster,
                                232448 - 1024, 7, "launch")
                  .ok());
  auto message = [&](int64_t smem = 0, const unsigned *clusterDims = nullptr) {
    return checkLaunchLimits(device, kernel, grid, block, clusterDims, smem, 7,
                             "launch 2 of 'k' (line 9)")
        .message();
  };
  grid[1] = 65536;
  EXPECT_EQ(message(), "launch 2 of 'k' (line 9): grid y 65536 exceeds the "
                       "device's 65535 at T=7");
  grid[1] = 4;
  block[2] = 65;
  EXPECT_EQ(message(), "launch 2 of 'k' (line 9): block z 65 exceeds the "
                       "device's 64 at T=7");
  block[2] = 2;
  EXPECT_EQ(message(), "launch 2 of 'k' (line 9): 2048 threads per block "
                       "exceed the 1024 the kernel can have at T=7");
  // A kernel's registers may allow fewer threads than the device.
  block[2] = 1;
  kernel.maxThreadsPerBlock = 512;
  EXPECT_EQ(message(), "launch 2 of 'k' (line 9): 1024 threads per block "
                       "exceed the 512 the kernel can have at T=7");
  kernel.maxThreadsPerBlock = 1024;
  EXPECT_EQ(message(232448 - 1023),
            "launch 2 of 'k' (line 9): smem 231425 at T=7 and the kernel's "
            "1024 static bytes exceed the device's 232448 bytes of shared "
            "memory per block");
  EXPECT_EQ(message(0, cluster), "launch 2 of 'k' (line 9): grid y 4 is no "
                                 "multiple of the cluster's 5 at T=7");
}

TEST(Limits, TensorMapBoxes) {
  Manifest manifest;
  ASSERT_TRUE(parseManifest(kExample, "manifest.txt", manifest).ok());
  TensorMapDecl map = manifest.variants[0].tensorMaps[0]; // f32, swizzle 128
  uint32_t box[2] = {32, 256};
  EXPECT_TRUE(checkTensorMapBox(map, box, 5, "tensor map 'm'").ok());
  box[1] = 257;
  EXPECT_EQ(checkTensorMapBox(map, box, 5, "tensor map 'm'").message(),
            "tensor map 'm': box size 1 is 257, outside [1, 256] at T=5");
  box[1] = 0;
  EXPECT_EQ(checkTensorMapBox(map, box, 5, "tensor map 'm'").message(),
            "tensor map 'm': box size 1 is 0, outside [1, 256] at T=5");
  box[1] = 8;
  box[0] = 6;
  EXPECT_EQ(checkTensorMapBox(map, box, 5, "tensor map 'm'").message(),
            "tensor map 'm': the innermost box is 24 bytes, not a multiple of "
            "16 at T=5");
  box[0] = 64;
  EXPECT_EQ(checkTensorMapBox(map, box, 5, "tensor map 'm'").message(),
            "tensor map 'm': the innermost box is 256 bytes, wider than its "
            "128-byte swizzle at T=5");
  map.swizzleBytes = 0;
  EXPECT_TRUE(checkTensorMapBox(map, box, 5, "tensor map 'm'").ok());
}

TEST(Manifest, LoadReadsRegularFilesOfBoundedSize) {
  TempBundle bundle;
  Manifest manifest;
  std::string path = bundle.path + "/manifest.txt";
  // A device never ends: reading it whole would exhaust memory.
  bundle.link("manifest.txt", "/dev/zero");
  Status status = loadManifest(bundle.path, manifest);
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  EXPECT_EQ(status.message(), path + " is not a regular file");
  std::remove(path.c_str());

  // Opening a FIFO without a writer would block; a writer opened here after
  // a few seconds unblocks a runtime that does not refuse it, so that the
  // test fails instead of hanging.
  bundle.fifo("manifest.txt");
  auto loading = std::async(std::launch::async, [&] {
    Manifest fromFifo;
    return loadManifest(bundle.path, fromFifo);
  });
  if (loading.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "loading a FIFO manifest blocks";
    close(open(path.c_str(), O_WRONLY));
  }
  EXPECT_EQ(loading.get().message(), path + " is not a regular file");
  std::remove(path.c_str());

  // A manifest is a few kilobytes; one past the bound is refused before it
  // is read.
  bundle.write("manifest.txt", "");
  ASSERT_EQ(truncate(path.c_str(), kMaxManifestBytes + 1), 0);
  EXPECT_EQ(loadManifest(bundle.path, manifest).message(),
            path + " has " + std::to_string(kMaxManifestBytes + 1) +
                " bytes, more than the " + std::to_string(kMaxManifestBytes) +
                " the runtime reads");

  std::string contents;
  bundle.write("kernels.ptx", "0123456789");
  EXPECT_TRUE(readFile(bundle.path + "/kernels.ptx", 10, contents).ok());
  EXPECT_EQ(contents, "0123456789");
  EXPECT_FALSE(readFile(bundle.path + "/kernels.ptx", 9, contents).ok());
}

} // namespace
