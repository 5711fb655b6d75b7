/*===- Runtime.h - Load and launch moe kernel bundles -----------*- C++ -*-===*\
|*                                                                            *|
|* Loads a kernel bundle (docs/BUNDLE.md) onto one CUDA device and launches   *|
|* its plan on a caller's stream. Only the CUDA driver API is used, and       *|
|* libcuda is loaded at run time: a program starts on a machine without a     *|
|* GPU and gets an error saying so. Every failure is a status code with a     *|
|* message; nothing throws or aborts.                                         *|
|*                                                                            *|
|* The first part is a plain C API (for C and Python's ctypes); the second,   *|
|* for C++ only, is the same API as a class.                                  *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef MOE_RUNTIME_RUNTIME_H
#define MOE_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What went wrong; every status but MOE_OK comes with a message.
typedef enum MoeStatusCode {
  MOE_OK = 0,
  /// A run's, a binding's or a query's arguments are wrong (tensor count,
  /// element type, dims, pointer, T out of range, an exchange buffer
  /// unbound or passed another slice than its rank's).
  MOE_ERROR_INVALID_ARGUMENT = 1,
  /// The bundle is malformed (manifest syntax, names, missing files) or its
  /// module lacks a kernel the plan launches.
  MOE_ERROR_INVALID_BUNDLE = 2,
  /// libcuda.so.1 cannot be loaded or initialised (no driver, no GPU).
  MOE_ERROR_DRIVER_UNAVAILABLE = 3,
  /// The device's compute capability differs from the bundle's target.
  MOE_ERROR_UNSUPPORTED_DEVICE = 4,
  /// A CUDA driver call failed; the message names the call and the error.
  MOE_ERROR_CUDA = 5,
} MoeStatusCode;

/// Element types of tensors and workspaces.
typedef enum MoeDtype {
  MOE_DTYPE_F32 = 0,
  MOE_DTYPE_BF16 = 1,
  MOE_DTYPE_F16 = 2,
  MOE_DTYPE_I32 = 3,
  MOE_DTYPE_I64 = 4,
  MOE_DTYPE_U8 = 5,
  MOE_DTYPE_F8E4M3 = 6, ///< float8 e4m3fn (OCP FP8).
} MoeDtype;

/// Whether the kernels read or write a caller tensor.
typedef enum MoeRole { MOE_ROLE_INPUT = 0, MOE_ROLE_OUTPUT = 1 } MoeRole;

/// The largest rank of a tensor.
#define MOE_MAX_RANK 4

/// A caller's tensor: a dense row-major device buffer.
typedef struct MoeTensor {
  void *data;    ///< Device pointer (a CUdeviceptr), 16-byte aligned.
  int32_t dtype; ///< A MoeDtype.
  int32_t rank;
  int64_t dims[MOE_MAX_RANK]; ///< dims[0..rank-1], outermost first.
} MoeTensor;

/// A tensor the bundle expects, as declared by its `tensor` line.
typedef struct MoeTensorInfo {
  const char *name; ///< Valid while the bundle is open.
  int32_t role;     ///< A MoeRole.
  int32_t dtype;    ///< A MoeDtype.
  int32_t rank;
  int64_t dims[MOE_MAX_RANK]; ///< At the token count of the query.
  /// An exchange buffer's (its `exchange` line): the ranks whose slices
  /// moe_bundle_bind_peers binds, and the rank whose slice the caller
  /// passes; 0 and 0 for any other tensor.
  int32_t world;
  int32_t rank_of_slice;
} MoeTensorInfo;

/// A bundle loaded onto one device.
typedef struct MoeBundle MoeBundle;

/// The functions that return int return a MoeStatusCode and write its
/// message (empty on success), truncated to `errlen` bytes including the
/// NUL, into `errbuf` unless it is NULL.

/// Loads the bundle in directory `path` onto CUDA device `device` (its
/// primary context) and allocates its workspaces. Stores the handle in
/// `*bundle`, NULL on failure. Reads MOE_DEPENDENT_LAUNCH from the
/// environment: `0` launches the bundle's `dependent` kernels plainly
/// (docs/BUNDLE.md, "Dependent launches").
int moe_bundle_open(const char *path, int device, MoeBundle **bundle,
                    char *errbuf, size_t errlen);

/// Enqueues, for `tokens` tokens, the zero fills and launches of the variant
/// that serves `tokens` (see moe_bundle_variant_for_tokens) on `stream` (a
/// CUstream; NULL is the legacy default stream), a `dependent` launch as a
/// programmatic dependent of the one before it. `tensors` are the `count`
/// caller tensors in declaration order; an exchange buffer's must be the
/// slice of its rank that moe_bundle_bind_peers bound, and every exchange
/// buffer must be bound. Picks the variant on the host, and
/// never synchronises or allocates device memory, so a run at a given T can
/// be captured in a CUDA graph; host memory is allocated only to cache the
/// tensor map of a (pointer, T) pair met for the first time. Not safe to
/// call concurrently on one bundle.
int moe_bundle_run(MoeBundle *bundle, int64_t tokens, const MoeTensor *tensors,
                   int count, void *stream, char *errbuf, size_t errlen);

/// Binds the `count` slices of exchange buffer `tensor` (a tensor with an
/// `exchange` line, docs/BUNDLE.md): `slices[d]` is the device address of
/// rank d's slice, each the tensor's dims, 16-byte aligned and reachable
/// from this device (its own memory or a peer's, through NVLink); `count`
/// must be the tensor's world. The runtime copies them into a device table,
/// which `peers:` kernel arguments pass, so a bundle that has exchange
/// buffers runs only once each is bound, and each run's tensor for it must
/// be `slices[rank]`. Blocking (it uploads the table): call it before the
/// runs, outside a CUDA graph capture, and again only once the runs that
/// use the previous binding have finished.
int moe_bundle_bind_peers(MoeBundle *bundle, int tensor,
                          const void *const *slices, int count, char *errbuf,
                          size_t errlen);

/// Frees the workspaces, peer tables and module and releases the device's
/// primary context. Accepts NULL. The caller must have synchronised the
/// streams that ran the bundle.
void moe_bundle_close(MoeBundle *bundle);

/// The largest token count a run accepts; 0 for NULL.
int64_t moe_bundle_tokens_max(const MoeBundle *bundle);

/// The number of caller tensors a run takes; 0 for NULL.
int moe_bundle_num_tensors(const MoeBundle *bundle);

/// Variants: a bundle holds one or more plans, each for the token counts up
/// to its bound; bounds increase strictly and the last one is tokens-max. A
/// run with T tokens executes the first variant whose bound is at least T.
/// (A format version 1 bundle is one variant, bound tokens-max.)

/// The number of variants, at least 1; 0 for NULL.
int moe_bundle_num_variants(const MoeBundle *bundle);

/// The bound of variant `index`: the largest token count it serves; 0 for
/// NULL or an index outside [0, moe_bundle_num_variants).
int64_t moe_bundle_variant_max_tokens(const MoeBundle *bundle, int index);

/// Stores in `*index` the variant a run with `tokens` tokens executes; an
/// error when `tokens` is outside [1, tokens-max].
int moe_bundle_variant_for_tokens(const MoeBundle *bundle, int64_t tokens,
                                  int *index, char *errbuf, size_t errlen);

/// Describes caller tensor `index` with its dims at `tokens` tokens, so that
/// the caller can allocate the outputs.
int moe_bundle_tensor_info(const MoeBundle *bundle, int index, int64_t tokens,
                           MoeTensorInfo *info, char *errbuf, size_t errlen);

/// Device memory and copies for hosts that link no CUDA runtime of their own
/// (moe-run, tests). Each call makes `device`'s primary context current
/// around itself; an allocation keeps that context alive until it is freed.
/// Copies and synchronisation are blocking: these are for setting up and
/// checking a run, not for the steady state.
int moe_device_alloc(int device, size_t bytes, void **pointer, char *errbuf,
                     size_t errlen);
int moe_device_free(int device, void *pointer, char *errbuf, size_t errlen);
int moe_device_upload(int device, void *destination, const void *source,
                      size_t bytes, char *errbuf, size_t errlen);
int moe_device_download(int device, void *destination, const void *source,
                        size_t bytes, char *errbuf, size_t errlen);
int moe_device_synchronize(int device, char *errbuf, size_t errlen);

#ifdef __cplusplus
} // extern "C"

#include <memory>
#include <string>
#include <utility>

typedef struct CUstream_st *CUstream;

namespace moe {
namespace runtime {

/// The outcome of a runtime call: MOE_OK, or an error code and its message.
class [[nodiscard]] Status {
public:
  /// Success.
  Status() = default;
  Status(MoeStatusCode code, std::string message)
      : statusCode(code), text(std::move(message)) {}

  bool ok() const { return statusCode == MOE_OK; }
  MoeStatusCode code() const { return statusCode; }
  /// Empty on success.
  const std::string &message() const { return text; }

private:
  MoeStatusCode statusCode = MOE_OK;
  std::string text;
};

/// A bundle loaded onto one device: its module, workspaces and tensor-map
/// cache. See the C functions above for the contract of each method.
class Bundle {
public:
  ~Bundle();
  Bundle(const Bundle &) = delete;
  Bundle &operator=(const Bundle &) = delete;

  /// Loads the bundle in directory `path` onto device `device`; see
  /// moe_bundle_open.
  static Status open(const std::string &path, int device,
                     std::unique_ptr<Bundle> &bundle);

  /// Enqueues the plan for `tokens` tokens on `stream`; see moe_bundle_run.
  Status run(int64_t tokens, const MoeTensor *tensors, int count,
             CUstream stream);
  /// Binds the ranks' slices of exchange buffer `tensor`; see
  /// moe_bundle_bind_peers.
  Status bindPeers(int tensor, const void *const *slices, int count);

  /// The largest token count a run accepts.
  int64_t tokensMax() const;
  /// The number of caller tensors a run takes.
  int numTensors() const;
  /// The number of variants; see moe_bundle_num_variants.
  int numVariants() const;
  /// The bound of variant `index`; see moe_bundle_variant_max_tokens.
  int64_t variantMaxTokens(int index) const;
  /// The variant a run with `tokens` tokens executes; see
  /// moe_bundle_variant_for_tokens.
  Status variantForTokens(int64_t tokens, int &index) const;
  /// Describes caller tensor `index` at `tokens` tokens.
  Status tensorInfo(int index, int64_t tokens, MoeTensorInfo &info) const;

private:
  struct State;
  explicit Bundle(std::unique_ptr<State> state);

  std::unique_ptr<State> state;
};

/// See moe_device_alloc and the functions after it.
Status allocateDevice(int device, size_t bytes, void *&pointer);
Status freeDevice(int device, void *pointer);
Status copyToDevice(int device, void *destination, const void *source,
                    size_t bytes);
Status copyToHost(int device, void *destination, const void *source,
                  size_t bytes);
Status synchronizeDevice(int device);

} // namespace runtime
} // namespace moe

#endif // __cplusplus

#endif // MOE_RUNTIME_RUNTIME_H
