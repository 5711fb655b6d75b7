//===- Driver.cpp - The CUDA driver API loaded at run time ----------------===//

#include "Driver.h"

#include <dlfcn.h>

using namespace moe::runtime;

namespace {
/// The driver table, or why there is none.
struct LoadedDriver {
  Driver driver;
  Status status;
};

Status unavailable(const std::string &why) {
  return Status(MOE_ERROR_DRIVER_UNAVAILABLE,
                "CUDA driver not available: " + why);
}

LoadedDriver loadDriver() {
  LoadedDriver loaded;
  // The handle stays open for the life of the process: the table points
  // into the library.
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    loaded.status = unavailable(dlerror());
    return loaded;
  }
  Driver &driver = loaded.driver;
#define MOE_DRIVER_LOOKUP(member, symbol)                                      \
  driver.member =                                                              \
      reinterpret_cast<decltype(driver.member)>(dlsym(library, #symbol));      \
  if (!driver.member) {                                                        \
    loaded.status = unavailable("libcuda.so.1 lacks " #symbol                  \
                                " (the runtime needs a CUDA 12 driver)");      \
    return loaded;                                                             \
  }
  MOE_DRIVER_FUNCTIONS(MOE_DRIVER_LOOKUP)
#undef MOE_DRIVER_LOOKUP
  if (CUresult result = driver.init(0))
    loaded.status = unavailable(driver.error(result, "cuInit").message());
  return loaded;
}
} // namespace

Status Driver::error(CUresult result, const std::string &what) const {
  const char *name = nullptr, *description = nullptr;
  if (getErrorName(result, &name) != CUDA_SUCCESS ||
      getErrorString(result, &description) != CUDA_SUCCESS)
    return Status(MOE_ERROR_CUDA,
                  what + ": unknown CUDA error " + std::to_string(result));
  return Status(MOE_ERROR_CUDA, what + ": " + name + " (" + description + ")");
}

Status moe::runtime::getDriver(const Driver *&driver) {
  // A function-local static is initialised once, thread-safely.
  static const LoadedDriver loaded = loadDriver();
  driver = &loaded.driver;
  return loaded.status;
}
