//===- Device.cpp - Device limits, and memory for hosts without a runtime -===//
//
// What a device can launch, which a bundle reads once when it opens. And
// device buffers and copies through the runtime's driver table for moe-run
// and other hosts that link no CUDA runtime: each call makes the device's
// primary context current around itself; an allocation keeps that context
// retained until it is freed, so buffers outlive the calls that made them.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "Manifest.h"

#include "moe/Runtime/Runtime.h"

using namespace moe::runtime;

namespace {
/// The driver, the primary context of `ordinal` retained and made current.
class DeviceScope {
public:
  explicit DeviceScope(int ordinal) {
    status = getDriver(driver);
    if (!status.ok())
      return;
    std::string which = "device " + std::to_string(ordinal);
    if (CUresult result = driver->deviceGet(&device, ordinal)) {
      status = driver->error(result, "cuDeviceGet for " + which);
      return;
    }
    if (CUresult result = driver->primaryCtxRetain(&context, device)) {
      status = driver->error(result, "cuDevicePrimaryCtxRetain for " + which);
      context = nullptr;
      return;
    }
    if (CUresult result = driver->ctxPushCurrent(context)) {
      status = driver->error(result, "cuCtxPushCurrent");
      driver->primaryCtxRelease(device);
      context = nullptr;
    }
  }
  ~DeviceScope() {
    if (!context)
      return;
    CUcontext popped;
    driver->ctxPopCurrent(&popped);
    if (release)
      driver->primaryCtxRelease(device);
  }

  Status status;
  const Driver *driver = nullptr;
  /// Whether to drop the context reference on exit; an allocation keeps it.
  bool release = true;

private:
  CUdevice device = 0;
  CUcontext context = nullptr;
};
} // namespace

Status moe::runtime::queryDeviceLimits(const Driver &driver, CUdevice device,
                                       DeviceLimits &limits) {
  struct Query {
    CUdevice_attribute attribute;
    int64_t *into;
  };
  const Query queries[] = {
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &limits.maxGrid[0]},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, &limits.maxGrid[1]},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, &limits.maxGrid[2]},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, &limits.maxBlock[0]},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, &limits.maxBlock[1]},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, &limits.maxBlock[2]},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &limits.maxThreadsPerBlock},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
       &limits.maxSharedPerBlock},
  };
  for (const Query &query : queries) {
    int value = 0;
    if (CUresult result =
            driver.deviceGetAttribute(&value, query.attribute, device))
      return driver.error(result, "cuDeviceGetAttribute(" +
                                      std::to_string(query.attribute) + ")");
    *query.into = value;
  }
  return Status();
}

Status moe::runtime::allocateDevice(int device, size_t bytes, void *&pointer) {
  pointer = nullptr;
  DeviceScope scope(device);
  if (!scope.status.ok())
    return scope.status;
  CUdeviceptr address = 0;
  if (CUresult result = scope.driver->memAlloc(&address, bytes ? bytes : 1))
    return scope.driver->error(result, "cuMemAlloc of " +
                                           std::to_string(bytes) + " bytes");
  pointer = reinterpret_cast<void *>(address);
  scope.release = false;
  return Status();
}

Status moe::runtime::freeDevice(int device, void *pointer) {
  if (!pointer)
    return Status();
  DeviceScope scope(device);
  if (!scope.status.ok())
    return scope.status;
  if (CUresult result =
          scope.driver->memFree(reinterpret_cast<CUdeviceptr>(pointer)))
    return scope.driver->error(result, "cuMemFree");
  // Drops the reference the allocation held, besides the scope's own.
  CUdevice handle;
  if (scope.driver->deviceGet(&handle, device) == CUDA_SUCCESS)
    scope.driver->primaryCtxRelease(handle);
  return Status();
}

Status moe::runtime::copyToDevice(int device, void *destination,
                                  const void *source, size_t bytes) {
  DeviceScope scope(device);
  if (!scope.status.ok())
    return scope.status;
  if (CUresult result = scope.driver->memcpyHtoD(
          reinterpret_cast<CUdeviceptr>(destination), source, bytes))
    return scope.driver->error(result, "cuMemcpyHtoD");
  return Status();
}

Status moe::runtime::copyToHost(int device, void *destination,
                                const void *source, size_t bytes) {
  DeviceScope scope(device);
  if (!scope.status.ok())
    return scope.status;
  if (CUresult result = scope.driver->memcpyDtoH(
          destination, reinterpret_cast<CUdeviceptr>(source), bytes))
    return scope.driver->error(result, "cuMemcpyDtoH");
  return Status();
}

Status moe::runtime::synchronizeDevice(int device) {
  DeviceScope scope(device);
  if (!scope.status.ok())
    return scope.status;
  if (CUresult result = scope.driver->ctxSynchronize())
    return scope.driver->error(result, "cuCtxSynchronize");
  return Status();
}
