//===- Driver.h - The CUDA driver API loaded at run time --------*- C++ -*-===//
//
// The runtime never links libcuda: it dlopens libcuda.so.1 on first use and
// looks up the functions it calls, so that programs start on machines
// without a driver and report that as an error. cuda.h supplies the types
// and the signatures only.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_RUNTIME_DRIVER_H
#define MOE_LIB_RUNTIME_DRIVER_H

#include "moe/Runtime/Runtime.h"

#include <cuda.h>

namespace moe {
namespace runtime {

/// The driver functions the runtime calls, as (member, exported symbol).
/// The symbols are the versioned names that cuda.h maps the plain ones to.
#define MOE_DRIVER_FUNCTIONS(X)                                                \
  X(init, cuInit)                                                              \
  X(deviceGet, cuDeviceGet)                                                    \
  X(deviceGetAttribute, cuDeviceGetAttribute)                                  \
  X(primaryCtxRetain, cuDevicePrimaryCtxRetain)                                \
  X(primaryCtxRelease, cuDevicePrimaryCtxRelease_v2)                           \
  X(ctxGetCurrent, cuCtxGetCurrent)                                            \
  X(ctxPushCurrent, cuCtxPushCurrent_v2)                                       \
  X(ctxPopCurrent, cuCtxPopCurrent_v2)                                         \
  X(moduleLoadDataEx, cuModuleLoadDataEx)                                      \
  X(moduleUnload, cuModuleUnload)                                              \
  X(moduleGetFunction, cuModuleGetFunction)                                    \
  X(funcGetAttribute, cuFuncGetAttribute)                                      \
  X(funcSetAttribute, cuFuncSetAttribute)                                      \
  X(memAlloc, cuMemAlloc_v2)                                                   \
  X(memFree, cuMemFree_v2)                                                     \
  X(memsetD8Async, cuMemsetD8Async)                                            \
  X(memcpyHtoD, cuMemcpyHtoD_v2)                                               \
  X(memcpyDtoH, cuMemcpyDtoH_v2)                                               \
  X(ctxSynchronize, cuCtxSynchronize)                                          \
  X(launchKernelEx, cuLaunchKernelEx)                                          \
  X(tensorMapEncodeTiled, cuTensorMapEncodeTiled)                              \
  X(getErrorName, cuGetErrorName)                                              \
  X(getErrorString, cuGetErrorString)

/// Pointers to the driver's functions.
struct Driver {
#define MOE_DRIVER_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  MOE_DRIVER_FUNCTIONS(MOE_DRIVER_MEMBER)
#undef MOE_DRIVER_MEMBER

  /// The MOE_ERROR_CUDA status "<what>: <name> (<description>)" of a
  /// failed call. Callers build `what` only on failure, so that the launch
  /// path allocates nothing.
  Status error(CUresult result, const std::string &what) const;
};

/// Makes a context current for the lifetime of the scope, then restores the
/// one that was current before.
class ContextScope {
public:
  ContextScope(const Driver &driver, CUcontext context) : driver(driver) {
    if (CUresult result = driver.ctxPushCurrent(context))
      status = driver.error(result, "cuCtxPushCurrent");
  }
  ~ContextScope() {
    CUcontext popped;
    if (status.ok())
      driver.ctxPopCurrent(&popped);
  }
  /// Whether the context was made current.
  Status status;

private:
  const Driver &driver;
};

struct DeviceLimits;

/// Reads what `device` can launch (Device.cpp).
Status queryDeviceLimits(const Driver &driver, CUdevice device,
                         DeviceLimits &limits);

/// Loads libcuda.so.1 and initialises it on the first call (thread-safe);
/// later calls return the same table or the same error.
Status getDriver(const Driver *&driver);

} // namespace runtime
} // namespace moe

#endif // MOE_LIB_RUNTIME_DRIVER_H
