//===- Manifest.h - The launch plan of a kernel bundle ----------*- C++ -*-===//
//
// A bundle's manifest.txt parsed and checked (docs/BUNDLE.md), and the checks
// of a run's tensors against it. Nothing here touches the GPU, so all of it
// is testable on a machine without one.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_RUNTIME_MANIFEST_H
#define MOE_LIB_RUNTIME_MANIFEST_H

#include "Expression.h"

#include <array>

namespace moe {
namespace runtime {

/// "f32", "bf16", ...; "?" for a value that is no MoeDtype.
const char *dtypeName(int32_t dtype);
/// The size of one element in bytes; 0 for a value that is no MoeDtype.
int64_t dtypeBytes(int32_t dtype);

/// A caller tensor (`tensor` line) or runtime-owned workspace (`workspace`).
struct BufferDecl {
  std::string name;
  MoeRole role = MOE_ROLE_INPUT; ///< Tensors only.
  MoeDtype dtype = MOE_DTYPE_F32;
  std::vector<Expression> dims;
  /// Workspaces only: the device allocation it uses, an index into
  /// Manifest::workspaceNames (shared by the variants' workspaces of one
  /// name).
  int allocation = 0;
  /// Tensors only, from an `exchange` line: the ranks of an exchange buffer
  /// (0: not one) and the rank whose slice the caller passes.
  int world = 0, rank = 0;
};

/// A name that denotes a buffer: caller tensor `index` (Manifest::tensors)
/// or workspace `index` of the variant (Variant::workspaces).
struct BufferRef {
  bool isWorkspace = false;
  int index = 0;
};

/// A `tensormap` line; dims, strides and box are innermost first.
struct TensorMapDecl {
  std::string name;
  BufferRef buffer;
  MoeDtype dtype = MOE_DTYPE_F32;
  std::vector<Expression> dims, strides, box;
  int swizzleBytes = 0;
  bool oobNan = false;
};

/// One kernel argument of a launch.
struct LaunchArg {
  enum class Kind { Buffer, I32, I64, TensorMap, Peers };
  Kind kind = Kind::Buffer;
  /// Kind::Buffer; Kind::Peers: the exchange buffer (a tensor) whose table
  /// of slices is passed.
  BufferRef buffer;
  Expression scalar; ///< Kind::I32, Kind::I64.
  int tensorMap = 0; ///< Kind::TensorMap: index into Variant::tensorMaps.
};

/// A `launch` line.
struct LaunchDecl {
  std::string kernel;
  int line = 0; ///< In manifest.txt, for messages.
  std::array<Expression, 3> grid, block, cluster;
  Expression smem;
  bool hasCluster = false;
  /// Launched as a programmatic dependent of the launch before it in the
  /// stream (version 3's `dependent`): the kernel waits for it itself.
  bool dependent = false;
  std::vector<LaunchArg> args;
};

/// The plan for the token counts up to `maxTokens` (a `variant` line and
/// the statements after it; all of a version 1 manifest).
struct Variant {
  int64_t maxTokens = 0;
  int line = 0; ///< Of the `variant` line; of `moe-bundle` in version 1.
  std::vector<BufferDecl> workspaces;
  std::vector<TensorMapDecl> tensorMaps;
  std::vector<BufferRef> zeros;
  std::vector<LaunchDecl> launches;
};

/// A parsed manifest whose names all resolve.
struct Manifest {
  int version = 0;    ///< 1, 2 or 3.
  std::string target; ///< E.g. "sm_90a".
  int computeMajor = 0, computeMinor = 0;
  /// Module files as written (relative to the bundle); `ptx` may be empty.
  std::string cubin, ptx;
  int64_t tokensMax = 0;
  std::vector<BufferDecl> tensors;
  /// One device allocation per workspace name, in order of first
  /// declaration.
  std::vector<std::string> workspaceNames;
  /// At least one, bounds strictly increasing, the last one tokens-max.
  std::vector<Variant> variants;
};

/// What a device can launch, read once per bundle from the driver
/// (queryDeviceLimits) and checked against every launch and tensor map a run
/// is about to enqueue, so that a plan beyond them is an error with a
/// message before anything is enqueued, not a CUDA error after the zero
/// fills.
struct DeviceLimits {
  int64_t maxGrid[3] = {};
  int64_t maxBlock[3] = {};
  int64_t maxThreadsPerBlock = 0;
  /// Shared memory a block may have once it opts in, static included.
  int64_t maxSharedPerBlock = 0;
};

/// The limits of one kernel of the module (cuFuncGetAttribute).
struct KernelLimits {
  /// Its threads per block, which its registers may lower below the
  /// device's.
  int64_t maxThreadsPerBlock = 0;
  /// Its static shared memory, which the dynamic shares a block with.
  int64_t staticShared = 0;
};

/// The largest box size of a TMA descriptor in any dimension.
constexpr int64_t kMaxTensorMapBox = 256;

/// Checks a launch evaluated at T = `tokens` against the device's and its
/// kernel's limits: grid and block sizes per dimension, threads per block,
/// static and dynamic shared memory, and with a cluster a grid that is a
/// whole number of clusters. Messages start with `owner`.
Status checkLaunchLimits(const DeviceLimits &device, const KernelLimits &kernel,
                         const unsigned grid[3], const unsigned block[3],
                         const unsigned *cluster, int64_t smem, int64_t tokens,
                         const std::string &owner);

/// Checks that `smem` bytes of dynamic shared memory, with the kernel's
/// static ones, fit the device's shared memory per block.
Status checkSharedMemoryLimit(const DeviceLimits &device,
                              const KernelLimits &kernel, int64_t smem,
                              int64_t tokens, const std::string &owner);

/// Checks the box of a tensor map evaluated at T = `tokens` against what
/// `cuTensorMapEncodeTiled` takes: each size in [1, kMaxTensorMapBox], the
/// innermost a multiple of 16 bytes and, swizzled, no wider than the
/// swizzle. Messages start with `owner`.
Status checkTensorMapBox(const TensorMapDecl &map, const uint32_t *box,
                         int64_t tokens, const std::string &owner);

/// Parses manifest text; `source` names it in messages, which read
/// "<source>:<line>: ...".
Status parseManifest(const std::string &text, const std::string &source,
                     Manifest &manifest);

/// The largest manifest.txt the runtime reads: a manifest is a few
/// kilobytes of text.
constexpr int64_t kMaxManifestBytes = int64_t(16) << 20;
/// The largest module file (cubin or PTX) the runtime reads.
constexpr int64_t kMaxModuleBytes = int64_t(1) << 30;

/// Reads the whole file at `path` into `contents`: a regular file (after
/// symbolic links) of at most `maxBytes` bytes, anything else an error, so
/// that a device such as /dev/zero cannot exhaust memory nor a FIFO block the
/// caller.
Status readFile(const std::string &path, int64_t maxBytes,
                std::string &contents);

/// Joins a file name in the bundle to the bundle's directory.
std::string bundleFilePath(const std::string &directory,
                           const std::string &file);

/// Reads and parses `<directory>/manifest.txt` and checks that at least one
/// module file exists; a listed file that does not exist is dropped (`cubin`
/// or `ptx` becomes empty).
Status loadManifest(const std::string &directory, Manifest &manifest);

/// Evaluates the dims of `buffer` at T = `tokens` into `dims`; each must be
/// non-negative.
Status evaluateDims(const BufferDecl &buffer, int64_t tokens, int64_t *dims);

/// The size of `buffer` in bytes at T = `tokens`.
Status bufferBytes(const BufferDecl &buffer, int64_t tokens, int64_t &bytes);

/// The size in bytes of each workspace allocation (one per
/// Manifest::workspaceNames): the most that any variant's workspace of that
/// name needs at T = tokens-max.
Status workspaceAllocationBytes(const Manifest &manifest,
                                std::vector<int64_t> &bytes);

/// Checks 1 <= tokens <= tokens-max.
Status checkTokens(const Manifest &manifest, int64_t tokens);

/// Checks `tokens` and stores in `index` the variant that runs it: the first
/// whose bound is at least `tokens`.
Status selectVariant(const Manifest &manifest, int64_t tokens, int &index);

/// Checks a run's arguments: 1 <= tokens <= tokens-max, one tensor per
/// `tensor` line with its element type and its dims at `tokens`, pointers
/// non-null and 16-byte aligned.
Status checkRunArguments(const Manifest &manifest, int64_t tokens,
                         const MoeTensor *tensors, int count);

} // namespace runtime
} // namespace moe

#endif // MOE_LIB_RUNTIME_MANIFEST_H
