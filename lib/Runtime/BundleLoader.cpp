//===- BundleLoader.cpp - Load a kernel bundle onto a device, run it ------===//
//
// Loading resolves everything that does not depend on T (module, kernels,
// workspaces, every variant's argument slots). A run picks the variant for
// its T, evaluates that variant's plan at T, checks it and builds missing
// tensor maps before it enqueues anything, so that a failing check leaves
// the stream untouched; in the steady state it allocates nothing and builds
// no tensor map.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "Manifest.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

using namespace moe::runtime;

namespace {
/// Tensor maps cached per `tensormap` line. Past this many (base pointer, T)
/// pairs the cache starts over, so that a caller that never reuses buffers
/// cannot grow it without bound.
constexpr size_t kMaxCachedTensorMaps = 1024;

constexpr int64_t kMaxUnsigned = std::numeric_limits<unsigned>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

CUtensorMapDataType tensorMapDataType(MoeDtype dtype) {
  switch (dtype) {
  case MOE_DTYPE_F32:
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  case MOE_DTYPE_BF16:
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  case MOE_DTYPE_F16:
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  case MOE_DTYPE_I32:
    return CU_TENSOR_MAP_DATA_TYPE_INT32;
  case MOE_DTYPE_I64:
    return CU_TENSOR_MAP_DATA_TYPE_INT64;
  case MOE_DTYPE_U8:
  case MOE_DTYPE_F8E4M3:
    return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

CUtensorMapSwizzle tensorMapSwizzle(int bytes) {
  switch (bytes) {
  case 32:
    return CU_TENSOR_MAP_SWIZZLE_32B;
  case 64:
    return CU_TENSOR_MAP_SWIZZLE_64B;
  case 128:
    return CU_TENSOR_MAP_SWIZZLE_128B;
  default:
    return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

/// Evaluates `expression` at `tokens` into `value` and checks that it lies in
/// [min, max]; a message starts with `owner` and names `what`.
Status evaluateInRange(const Expression &expression, int64_t tokens,
                       int64_t min, int64_t max, const std::string &owner,
                       const char *what, int64_t &value) {
  Status status = expression.evaluate(tokens, value);
  if (!status.ok())
    return Status(status.code(), owner + ": " + status.message());
  if (value < min || value > max)
    return Status(MOE_ERROR_INVALID_BUNDLE,
                  owner + ": " + what + " '" + expression.text() + "' is " +
                      std::to_string(value) +
                      " at T=" + std::to_string(tokens) + ", outside [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
  return Status();
}
} // namespace

struct Bundle::State {
  /// A kernel of the module and the dynamic shared memory it may use.
  struct Kernel {
    std::string name;
    CUfunction function = nullptr;
    int64_t smemLimit = 0;
    KernelLimits limits;
  };

  /// One launch evaluated at a run's T, with storage for its arguments.
  struct Launch {
    std::string owner; ///< Names the launch in messages.
    int kernel = 0;
    unsigned grid[3] = {}, block[3] = {}, cluster[3] = {}, smem = 0;
    bool hasCluster = false;
    bool dependent = false; ///< The manifest's `dependent`.
    bool skipped = false;
    std::vector<uint64_t> values; ///< Pointer and scalar arguments.
    std::vector<void *> params;   ///< Into `values` or a cached tensor map.
  };

  /// The tensor maps of one `tensormap` line, per (base pointer, T).
  struct TensorMapCache {
    std::string owner;
    std::map<std::pair<CUdeviceptr, int64_t>, CUtensorMap> maps;
    CUtensorMap *current = nullptr; ///< The one for the run in progress.
  };

  /// The bound slices of an exchange buffer (moe_bundle_bind_peers) and
  /// the device table of them that `peers:` arguments pass.
  struct Exchange {
    std::vector<CUdeviceptr> slices; ///< Empty until bound.
    CUdeviceptr table = 0;
  };

  /// One variant's plan evaluated at a run's T, parallel to its
  /// declaration: each variant has its own tensor map caches.
  struct VariantState {
    std::vector<Launch> launches;
    std::vector<TensorMapCache> tensorMaps;
    std::vector<std::pair<CUdeviceptr, size_t>> zeroFills;
  };

  ~State();
  Status attach(int ordinal);
  Status loadModule(const std::string &directory);
  Status loadModuleFile(const std::string &directory, const std::string &file,
                        bool isPtx);
  Status resolveKernels();
  Status resolveKernel(const LaunchDecl &declared, Launch &launch);
  Status allocateWorkspaces();
  void initVariants();
  Status raiseSmemLimit(Kernel &kernel, int64_t smem);
  Status bindPeers(int tensor, const void *const *slices, int count);
  /// Checks that every exchange buffer is bound and that the run passes its
  /// rank's slice.
  Status checkExchanges(const MoeTensor *tensors) const;
  CUdeviceptr pointer(const Variant &variant, BufferRef buffer,
                      const MoeTensor *tensors) const;
  Status prepare(int variant, int64_t tokens, const MoeTensor *tensors);
  Status prepareTensorMap(int variant, size_t index, int64_t tokens,
                          const MoeTensor *tensors);
  Status prepareLaunch(int variant, size_t index, int64_t tokens,
                       const MoeTensor *tensors);
  Status enqueue(int variant, CUstream stream);
  /// Launches `launch` on `stream` with its cluster, and as a programmatic
  /// dependent of the kernel before it if it is `dependent` and
  /// dependentLaunch holds.
  CUresult launchKernel(Launch &launch, CUstream stream);

  Manifest manifest;
  const Driver *driver = nullptr;
  CUdevice device = 0;
  DeviceLimits limits;         ///< Of `device`.
  CUcontext context = nullptr; ///< The retained primary context.
  CUmodule module = nullptr;
  std::string moduleFile; ///< The file the module was loaded from.
  std::vector<Kernel> kernels;
  /// One per Manifest::workspaceNames, sized for the largest workspace of
  /// that name at tokens-max.
  std::vector<CUdeviceptr> workspaces;
  std::vector<int64_t> workspaceBytes;
  std::vector<VariantState> variants; ///< Parallel to Manifest::variants.
  std::vector<Exchange> exchanges;    ///< Parallel to Manifest::tensors.
  /// Whether `dependent` launches are programmatic dependents: unless
  /// MOE_DEPENDENT_LAUNCH=0 when the bundle opened, until the driver
  /// refuses one.
  bool dependentLaunch = true;
};

Bundle::State::~State() {
  if (!context)
    return;
  {
    ContextScope scope(*driver, context);
    if (scope.status.ok()) {
      for (CUdeviceptr workspace : workspaces)
        driver->memFree(workspace);
      for (const Exchange &exchange : exchanges)
        if (exchange.table)
          driver->memFree(exchange.table);
      if (module)
        driver->moduleUnload(module);
    }
  }
  driver->primaryCtxRelease(device);
}

Status Bundle::State::attach(int ordinal) {
  std::string which = "device " + std::to_string(ordinal);
  if (CUresult result = driver->deviceGet(&device, ordinal))
    return driver->error(result, "cuDeviceGet for " + which);
  int major = 0, minor = 0;
  if (CUresult result = driver->deviceGetAttribute(
          &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
    return driver->error(result, "cuDeviceGetAttribute for " + which);
  if (CUresult result = driver->deviceGetAttribute(
          &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
    return driver->error(result, "cuDeviceGetAttribute for " + which);
  if (major != manifest.computeMajor || minor != manifest.computeMinor)
    return Status(MOE_ERROR_UNSUPPORTED_DEVICE,
                  "the bundle targets " + manifest.target +
                      " (compute capability " +
                      std::to_string(manifest.computeMajor) + "." +
                      std::to_string(manifest.computeMinor) + ") but " + which +
                      " has compute capability " + std::to_string(major) + "." +
                      std::to_string(minor));
  if (Status status = queryDeviceLimits(*driver, device, limits); !status.ok())
    return status;
  if (CUresult result = driver->primaryCtxRetain(&context, device)) {
    context = nullptr;
    return driver->error(result, "cuDevicePrimaryCtxRetain for " + which);
  }
  return Status();
}

Status Bundle::State::loadModule(const std::string &directory) {
  // A cubin that cannot be read or loaded (another architecture, a newer
  // toolkit than the driver's) falls back to the PTX, if there is one.
  std::string failures;
  if (!manifest.cubin.empty()) {
    Status status = loadModuleFile(directory, manifest.cubin, false);
    if (status.ok() || manifest.ptx.empty())
      return status;
    failures = status.message() + "; ";
  }
  Status status = loadModuleFile(directory, manifest.ptx, true);
  if (status.ok())
    return status;
  return Status(status.code(), failures + status.message());
}

Status Bundle::State::loadModuleFile(const std::string &directory,
                                     const std::string &file, bool isPtx) {
  std::string image;
  if (Status status =
          readFile(bundleFilePath(directory, file), kMaxModuleBytes, image);
      !status.ok())
    return status;
  // The driver JIT-compiles PTX; its log says why PTX does not compile.
  char log[8192] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  CUresult result = driver->moduleLoadDataEx(&module, image.c_str(),
                                             isPtx ? 2 : 0, options, values);
  if (result == CUDA_SUCCESS) {
    moduleFile = file;
    return Status();
  }
  Status status =
      driver->error(result, (isPtx ? "JIT-compiling " : "loading ") + file);
  return log[0] ? Status(status.code(), status.message() + ": " + log) : status;
}

Status Bundle::State::resolveKernels() {
  variants.resize(manifest.variants.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    const Variant &variant = manifest.variants[v];
    std::vector<Launch> &launches = variants[v].launches;
    launches.resize(variant.launches.size());
    for (size_t i = 0; i < launches.size(); ++i) {
      const LaunchDecl &declared = variant.launches[i];
      launches[i].owner = "launch " + std::to_string(i) + " of '" +
                          declared.kernel + "' (line " +
                          std::to_string(declared.line) + ")";
      if (Status status = resolveKernel(declared, launches[i]); !status.ok())
        return status;
    }

    // Opt in to large shared memory now for the largest T the variant
    // serves; a run raises the limit again only if a smaller T needs more.
    for (size_t i = 0; i < launches.size(); ++i) {
      int64_t smem = 0;
      Kernel &kernel = kernels[launches[i].kernel];
      Status status =
          evaluateInRange(variant.launches[i].smem, variant.maxTokens, 0,
                          kMaxUnsigned, launches[i].owner, "smem", smem);
      if (status.ok())
        status = checkSharedMemoryLimit(limits, kernel.limits, smem,
                                        variant.maxTokens, launches[i].owner);
      if (status.ok())
        status = raiseSmemLimit(kernel, smem);
      if (!status.ok())
        return status;
    }
  }
  return Status();
}

Status Bundle::State::resolveKernel(const LaunchDecl &declared,
                                    Launch &launch) {
  launch.hasCluster = declared.hasCluster;
  launch.dependent = declared.dependent;
  launch.values.resize(declared.args.size());
  launch.params.resize(declared.args.size());
  auto known =
      std::find_if(kernels.begin(), kernels.end(), [&](const Kernel &kernel) {
        return kernel.name == declared.kernel;
      });
  launch.kernel = static_cast<int>(known - kernels.begin());
  if (known != kernels.end())
    return Status();
  Kernel kernel;
  kernel.name = declared.kernel;
  CUresult result = driver->moduleGetFunction(&kernel.function, module,
                                              declared.kernel.c_str());
  if (result == CUDA_ERROR_NOT_FOUND)
    return Status(MOE_ERROR_INVALID_BUNDLE, launch.owner + ": kernel '" +
                                                declared.kernel +
                                                "' is not in " + moduleFile);
  if (result)
    return driver->error(result, launch.owner + ": cuModuleGetFunction");
  // The default limit is 48 KiB less the kernel's static shared memory.
  int smemLimit = 0;
  result = driver->funcGetAttribute(
      &smemLimit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
      kernel.function);
  if (result)
    return driver->error(result, launch.owner + ": cuFuncGetAttribute");
  kernel.smemLimit = smemLimit;
  int maxThreads = 0, staticShared = 0;
  result = driver->funcGetAttribute(
      &maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernel.function);
  if (!result)
    result = driver->funcGetAttribute(
        &staticShared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function);
  if (result)
    return driver->error(result, launch.owner + ": cuFuncGetAttribute");
  kernel.limits = {maxThreads, staticShared};
  kernels.push_back(std::move(kernel));
  return Status();
}

Status Bundle::State::raiseSmemLimit(Kernel &kernel, int64_t smem) {
  if (smem <= kernel.smemLimit)
    return Status();
  if (CUresult result = driver->funcSetAttribute(
          kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          static_cast<int>(smem)))
    return driver->error(result, "cuFuncSetAttribute(" + kernel.name +
                                     ", max dynamic shared memory " +
                                     std::to_string(smem) + ")");
  kernel.smemLimit = smem;
  return Status();
}

Status Bundle::State::allocateWorkspaces() {
  if (Status status = workspaceAllocationBytes(manifest, workspaceBytes);
      !status.ok())
    return status;
  for (size_t i = 0; i < workspaceBytes.size(); ++i) {
    // cuMemAlloc refuses zero bytes; an empty workspace still gets a valid
    // pointer.
    CUdeviceptr workspace = 0;
    if (CUresult result = driver->memAlloc(
            &workspace,
            static_cast<size_t>(std::max<int64_t>(workspaceBytes[i], 1))))
      return driver->error(
          result, "allocating workspace '" + manifest.workspaceNames[i] +
                      "' (" + std::to_string(workspaceBytes[i]) + " bytes)");
    workspaces.push_back(workspace);
  }
  return Status();
}

Status Bundle::State::bindPeers(int tensor, const void *const *slices,
                                int count) {
  if (tensor < 0 || tensor >= static_cast<int>(manifest.tensors.size()))
    return Status(MOE_ERROR_INVALID_ARGUMENT,
                  "tensor index " + std::to_string(tensor) +
                      " is outside [0, " +
                      std::to_string(manifest.tensors.size()) + ")");
  const BufferDecl &declared = manifest.tensors[tensor];
  std::string owner =
      "tensor " + std::to_string(tensor) + " ('" + declared.name + "')";
  if (!declared.world)
    return Status(MOE_ERROR_INVALID_ARGUMENT,
                  owner + " is not an exchange buffer: it has no peers");
  if (count != declared.world)
    return Status(MOE_ERROR_INVALID_ARGUMENT,
                  owner + " has a slice on each of " +
                      std::to_string(declared.world) + " ranks, got " +
                      std::to_string(count) + " slices");
  std::vector<CUdeviceptr> bound(count);
  for (int d = 0; d < count; ++d) {
    bound[d] = reinterpret_cast<CUdeviceptr>(slices[d]);
    if (!bound[d] || bound[d] % 16)
      return Status(MOE_ERROR_INVALID_ARGUMENT,
                    owner + ": the slice of rank " + std::to_string(d) +
                        " is " + (bound[d] ? "not 16-byte aligned" : "null"));
  }
  ContextScope scope(*driver, context);
  if (!scope.status.ok())
    return scope.status;
  Exchange &exchange = exchanges[tensor];
  size_t bytes = bound.size() * sizeof(CUdeviceptr);
  if (!exchange.table)
    if (CUresult result = driver->memAlloc(&exchange.table, bytes))
      return driver->error(result, owner + ": allocating its peer table");
  if (CUresult result =
          driver->memcpyHtoD(exchange.table, bound.data(), bytes)) {
    exchange.slices.clear();
    return driver->error(result, owner + ": uploading its peer table");
  }
  exchange.slices = std::move(bound);
  return Status();
}

Status Bundle::State::checkExchanges(const MoeTensor *tensors) const {
  for (size_t i = 0; i < exchanges.size(); ++i) {
    const BufferDecl &declared = manifest.tensors[i];
    if (!declared.world)
      continue;
    const std::vector<CUdeviceptr> &slices = exchanges[i].slices;
    std::string owner =
        "tensor " + std::to_string(i) + " ('" + declared.name + "')";
    if (slices.empty())
      return Status(MOE_ERROR_INVALID_ARGUMENT,
                    owner + " is an exchange buffer of " +
                        std::to_string(declared.world) +
                        " ranks whose slices are not bound: call "
                        "moe_bundle_bind_peers first");
    if (reinterpret_cast<CUdeviceptr>(tensors[i].data) != slices[declared.rank])
      return Status(MOE_ERROR_INVALID_ARGUMENT,
                    owner + " is not the slice of rank " +
                        std::to_string(declared.rank) +
                        " that moe_bundle_bind_peers bound");
  }
  return Status();
}

void Bundle::State::initVariants() {
  for (size_t v = 0; v < variants.size(); ++v) {
    const Variant &variant = manifest.variants[v];
    VariantState &state = variants[v];
    state.tensorMaps.resize(variant.tensorMaps.size());
    for (size_t i = 0; i < state.tensorMaps.size(); ++i)
      state.tensorMaps[i].owner =
          "tensor map '" + variant.tensorMaps[i].name + "'";
    state.zeroFills.resize(variant.zeros.size());
  }
}

CUdeviceptr Bundle::State::pointer(const Variant &variant, BufferRef buffer,
                                   const MoeTensor *tensors) const {
  return buffer.isWorkspace
             ? workspaces[variant.workspaces[buffer.index].allocation]
             : reinterpret_cast<CUdeviceptr>(tensors[buffer.index].data);
}

Status Bundle::State::prepare(int variant, int64_t tokens,
                              const MoeTensor *tensors) {
  const Variant &plan = manifest.variants[variant];
  VariantState &state = variants[variant];
  // Workspaces were sized for tokens-max; a plan whose sizes are not
  // monotonic in T must not overrun them.
  for (const BufferDecl &workspace : plan.workspaces) {
    int64_t bytes = 0;
    if (Status status = bufferBytes(workspace, tokens, bytes); !status.ok())
      return status;
    int64_t allocated = workspaceBytes[workspace.allocation];
    if (bytes > allocated)
      return Status(MOE_ERROR_INVALID_BUNDLE,
                    "workspace '" + workspace.name + "' needs " +
                        std::to_string(bytes) +
                        " bytes at T=" + std::to_string(tokens) + " but has " +
                        std::to_string(allocated) + " (sized at tokens-max)");
  }
  for (size_t i = 0; i < state.zeroFills.size(); ++i) {
    BufferRef buffer = plan.zeros[i];
    const BufferDecl &zeroed = buffer.isWorkspace
                                   ? plan.workspaces[buffer.index]
                                   : manifest.tensors[buffer.index];
    int64_t bytes = 0;
    if (Status status = bufferBytes(zeroed, tokens, bytes); !status.ok())
      return status;
    state.zeroFills[i] = {pointer(plan, buffer, tensors),
                          static_cast<size_t>(bytes)};
  }
  for (size_t i = 0; i < state.tensorMaps.size(); ++i)
    if (Status status = prepareTensorMap(variant, i, tokens, tensors);
        !status.ok())
      return status;
  for (size_t i = 0; i < state.launches.size(); ++i)
    if (Status status = prepareLaunch(variant, i, tokens, tensors);
        !status.ok())
      return status;
  return Status();
}

Status Bundle::State::prepareTensorMap(int variant, size_t index,
                                       int64_t tokens,
                                       const MoeTensor *tensors) {
  const Variant &plan = manifest.variants[variant];
  const TensorMapDecl &declared = plan.tensorMaps[index];
  TensorMapCache &cache = variants[variant].tensorMaps[index];
  CUdeviceptr base = pointer(plan, declared.buffer, tensors);
  auto key = std::make_pair(base, tokens);
  auto cached = cache.maps.find(key);
  if (cached != cache.maps.end()) {
    cache.current = &cached->second;
    return Status();
  }

  int rank = static_cast<int>(declared.dims.size());
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elementStrides[5];
  for (int i = 0; i < rank; ++i) {
    int64_t dim = 0, boxDim = 0;
    Status status = evaluateInRange(declared.dims[i], tokens, 0, kMaxInt64,
                                    cache.owner, "dim", dim);
    if (status.ok())
      status = evaluateInRange(declared.box[i], tokens, 0, kMaxUnsigned,
                               cache.owner, "box size", boxDim);
    if (!status.ok())
      return status;
    dims[i] = static_cast<cuuint64_t>(dim);
    box[i] = static_cast<cuuint32_t>(boxDim);
    elementStrides[i] = 1;
  }
  if (Status status = checkTensorMapBox(declared, box, tokens, cache.owner);
      !status.ok())
    return status;
  for (int i = 0; i + 1 < rank; ++i) {
    int64_t stride = 0;
    if (Status status =
            evaluateInRange(declared.strides[i], tokens, 0, kMaxInt64,
                            cache.owner, "stride", stride);
        !status.ok())
      return status;
    strides[i] = static_cast<cuuint64_t>(stride);
  }

  CUtensorMap map;
  if (CUresult result = driver->tensorMapEncodeTiled(
          &map, tensorMapDataType(declared.dtype), rank,
          reinterpret_cast<void *>(base), dims, strides, box, elementStrides,
          CU_TENSOR_MAP_INTERLEAVE_NONE,
          tensorMapSwizzle(declared.swizzleBytes),
          CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          declared.oobNan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                          : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
    return driver->error(
        result, cache.owner +
                    ": cuTensorMapEncodeTiled at T=" + std::to_string(tokens));
  if (cache.maps.size() >= kMaxCachedTensorMaps)
    cache.maps.clear();
  cache.current = &cache.maps.emplace(key, map).first->second;
  return Status();
}

Status Bundle::State::prepareLaunch(int variant, size_t index, int64_t tokens,
                                    const MoeTensor *tensors) {
  const Variant &plan = manifest.variants[variant];
  const LaunchDecl &declared = plan.launches[index];
  VariantState &state = variants[variant];
  Launch &launch = state.launches[index];
  static const char *const kGridNames[] = {"grid x", "grid y", "grid z"};
  static const char *const kBlockNames[] = {"block x", "block y", "block z"};
  static const char *const kClusterNames[] = {"cluster x", "cluster y",
                                              "cluster z"};
  launch.skipped = false;
  for (int i = 0; i < 3; ++i) {
    int64_t grid = 0, block = 0, cluster = 1;
    Status status = evaluateInRange(declared.grid[i], tokens, 0, kMaxUnsigned,
                                    launch.owner, kGridNames[i], grid);
    if (status.ok())
      status = evaluateInRange(declared.block[i], tokens, 1, kMaxUnsigned,
                               launch.owner, kBlockNames[i], block);
    if (status.ok() && declared.hasCluster)
      status = evaluateInRange(declared.cluster[i], tokens, 1, kMaxUnsigned,
                               launch.owner, kClusterNames[i], cluster);
    if (!status.ok())
      return status;
    launch.grid[i] = static_cast<unsigned>(grid);
    launch.block[i] = static_cast<unsigned>(block);
    launch.cluster[i] = static_cast<unsigned>(cluster);
    launch.skipped |= grid == 0;
  }
  int64_t smem = 0;
  if (Status status = evaluateInRange(declared.smem, tokens, 0, kMaxUnsigned,
                                      launch.owner, "smem", smem);
      !status.ok())
    return status;
  launch.smem = static_cast<unsigned>(smem);
  if (!launch.skipped) {
    Kernel &kernel = kernels[launch.kernel];
    Status status =
        checkLaunchLimits(limits, kernel.limits, launch.grid, launch.block,
                          launch.hasCluster ? launch.cluster : nullptr, smem,
                          tokens, launch.owner);
    if (status.ok())
      status = raiseSmemLimit(kernel, smem);
    if (!status.ok())
      return status;
  }

  for (size_t i = 0; i < declared.args.size(); ++i) {
    const LaunchArg &arg = declared.args[i];
    uint64_t &value = launch.values[i];
    launch.params[i] = &value;
    int64_t scalar = 0;
    switch (arg.kind) {
    case LaunchArg::Kind::Buffer:
      value = pointer(plan, arg.buffer, tensors);
      break;
    case LaunchArg::Kind::I32: {
      if (Status status = evaluateInRange(arg.scalar, tokens,
                                          std::numeric_limits<int32_t>::min(),
                                          std::numeric_limits<int32_t>::max(),
                                          launch.owner, "i32 argument", scalar);
          !status.ok())
        return status;
      int32_t narrow = static_cast<int32_t>(scalar);
      std::memcpy(&value, &narrow, sizeof(narrow));
      break;
    }
    case LaunchArg::Kind::I64:
      if (Status status = evaluateInRange(
              arg.scalar, tokens, std::numeric_limits<int64_t>::min(),
              kMaxInt64, launch.owner, "i64 argument", scalar);
          !status.ok())
        return status;
      value = static_cast<uint64_t>(scalar);
      break;
    case LaunchArg::Kind::TensorMap:
      launch.params[i] = state.tensorMaps[arg.tensorMap].current;
      break;
    case LaunchArg::Kind::Peers:
      value = exchanges[arg.buffer.index].table;
      break;
    }
  }
  return Status();
}

Status Bundle::State::enqueue(int variant, CUstream stream) {
  VariantState &state = variants[variant];
  for (size_t i = 0; i < state.zeroFills.size(); ++i) {
    auto [pointer, bytes] = state.zeroFills[i];
    if (!bytes)
      continue;
    if (CUresult result = driver->memsetD8Async(pointer, 0, bytes, stream))
      return driver->error(result, "cuMemsetD8Async for zero statement " +
                                       std::to_string(i));
  }
  for (Launch &launch : state.launches) {
    if (launch.skipped)
      continue;
    if (CUresult result = launchKernel(launch, stream))
      return driver->error(result, launch.owner);
  }
  return Status();
}

CUresult Bundle::State::launchKernel(Launch &launch, CUstream stream) {
  CUlaunchAttribute attributes[2] = {};
  CUlaunchConfig config = {};
  config.gridDimX = launch.grid[0];
  config.gridDimY = launch.grid[1];
  config.gridDimZ = launch.grid[2];
  config.blockDimX = launch.block[0];
  config.blockDimY = launch.block[1];
  config.blockDimZ = launch.block[2];
  config.sharedMemBytes = launch.smem;
  config.hStream = stream;
  config.attrs = attributes;
  if (launch.hasCluster) {
    CUlaunchAttribute &cluster = attributes[config.numAttrs++];
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = launch.cluster[0];
    cluster.value.clusterDim.y = launch.cluster[1];
    cluster.value.clusterDim.z = launch.cluster[2];
  }
  // The kernel may start while the kernel before it in the stream finishes
  // and waits for it itself (griddepcontrol.wait). After a zero fill, or a
  // kernel that lets no dependent start early (the caller's), it starts
  // once that work is done, as a plain launch would.
  bool programmatic = launch.dependent && dependentLaunch;
  if (programmatic) {
    CUlaunchAttribute &serialization = attributes[config.numAttrs++];
    serialization.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    serialization.value.programmaticStreamSerializationAllowed = 1;
  }
  CUfunction function = kernels[launch.kernel].function;
  CUresult result =
      driver->launchKernelEx(&config, function, launch.params.data(), nullptr);
  if (!programmatic || (result != CUDA_ERROR_NOT_SUPPORTED &&
                        result != CUDA_ERROR_INVALID_VALUE))
    return result;
  // A driver that refuses the attribute: a plain launch, whose wait returns
  // at once, and plain launches from now on if that was what it refused.
  --config.numAttrs;
  result =
      driver->launchKernelEx(&config, function, launch.params.data(), nullptr);
  if (result == CUDA_SUCCESS)
    dependentLaunch = false;
  return result;
}

Bundle::Bundle(std::unique_ptr<State> state) : state(std::move(state)) {}

Bundle::~Bundle() = default;

Status Bundle::open(const std::string &path, int device,
                    std::unique_ptr<Bundle> &bundle) {
  bundle.reset();
  auto state = std::make_unique<State>();
  // Read once per bundle: MOE_DEPENDENT_LAUNCH=0 launches every kernel as a
  // plain one (to measure what dependent launches gain).
  const char *dependent = std::getenv("MOE_DEPENDENT_LAUNCH");
  state->dependentLaunch = !dependent || std::strcmp(dependent, "0") != 0;
  if (Status status = loadManifest(path, state->manifest); !status.ok())
    return status;
  if (Status status = getDriver(state->driver); !status.ok())
    return status;
  if (Status status = state->attach(device); !status.ok())
    return status;

  ContextScope scope(*state->driver, state->context);
  if (!scope.status.ok())
    return scope.status;
  Status status = state->loadModule(path);
  if (status.ok())
    status = state->resolveKernels();
  if (status.ok())
    status = state->allocateWorkspaces();
  if (!status.ok())
    return status;
  state->initVariants();
  state->exchanges.resize(state->manifest.tensors.size());
  bundle.reset(new Bundle(std::move(state)));
  return Status();
}

Status Bundle::run(int64_t tokens, const MoeTensor *tensors, int count,
                   CUstream stream) {
  if (Status status =
          checkRunArguments(state->manifest, tokens, tensors, count);
      !status.ok())
    return status;
  if (Status status = state->checkExchanges(tensors); !status.ok())
    return status;
  int variant = 0;
  if (Status status = selectVariant(state->manifest, tokens, variant);
      !status.ok())
    return status;
  ContextScope scope(*state->driver, state->context);
  if (!scope.status.ok())
    return scope.status;
  if (Status status = state->prepare(variant, tokens, tensors); !status.ok())
    return status;
  return state->enqueue(variant, stream);
}

Status Bundle::bindPeers(int tensor, const void *const *slices, int count) {
  return state->bindPeers(tensor, slices, count);
}

int64_t Bundle::tokensMax() const { return state->manifest.tokensMax; }

int Bundle::numVariants() const {
  return static_cast<int>(state->manifest.variants.size());
}

int64_t Bundle::variantMaxTokens(int index) const {
  if (index < 0 || index >= numVariants())
    return 0;
  return state->manifest.variants[index].maxTokens;
}

Status Bundle::variantForTokens(int64_t tokens, int &index) const {
  return selectVariant(state->manifest, tokens, index);
}

int Bundle::numTensors() const {
  return static_cast<int>(state->manifest.tensors.size());
}

Status Bundle::tensorInfo(int index, int64_t tokens,
                          MoeTensorInfo &info) const {
  const Manifest &manifest = state->manifest;
  if (index < 0 || index >= numTensors())
    return Status(MOE_ERROR_INVALID_ARGUMENT,
                  "tensor index " + std::to_string(index) + " is outside [0, " +
                      std::to_string(numTensors()) + ")");
  if (Status status = checkTokens(manifest, tokens); !status.ok())
    return status;
  const BufferDecl &declared = manifest.tensors[index];
  info = MoeTensorInfo();
  info.name = declared.name.c_str();
  info.role = declared.role;
  info.dtype = declared.dtype;
  info.rank = static_cast<int32_t>(declared.dims.size());
  info.world = declared.world;
  info.rank_of_slice = declared.rank;
  return evaluateDims(declared, tokens, info.dims);
}
