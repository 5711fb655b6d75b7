//===- BundleTest.cpp - Run checks and the runtime without a driver -------===//
//
// Pins down the checks of a run's arguments (T range, tensor count, element
// types, dims at T, null and misaligned pointers), and that on a machine
// without libcuda opening a valid bundle is an error that says so, through
// the C++ and the C API, with no crash.
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"
#include "TempBundle.h"

#include <dlfcn.h>

using namespace moe::runtime;

namespace {

const char *const kManifest = R"(moe-bundle 1
target sm_90a
module kernels.cubin
tokens-max 64
tensor logits  input  f32  T 256
tensor bias    input  f32  256
tensor weights output bf16 T 9
tensor count   output i64
launch moe_gate grid cdiv(T,4) 1 1 block 128 1 1 smem 0 args logits bias weights count
)";

/// Fake device pointers: the checks never dereference them.
void *fakePointer(uintptr_t address) {
  return reinterpret_cast<void *>(address);
}

class RunArguments : public ::testing::Test {
protected:
  void SetUp() override {
    Status status = parseManifest(kManifest, "manifest.txt", manifest);
    ASSERT_TRUE(status.ok()) << status.message();
    tensors[0] = {fakePointer(0x1000), MOE_DTYPE_F32, 2, {16, 256}};
    tensors[1] = {fakePointer(0x2000), MOE_DTYPE_F32, 1, {256}};
    tensors[2] = {fakePointer(0x3000), MOE_DTYPE_BF16, 2, {16, 9}};
    tensors[3] = {fakePointer(0x4000), MOE_DTYPE_I64, 0, {}};
  }

  /// The message of checking the tensors at T=16, or "" when they pass.
  std::string check(int64_t tokens = 16, int count = 4) {
    Status status = checkRunArguments(manifest, tokens, tensors, count);
    EXPECT_TRUE(status.ok() || status.code() == MOE_ERROR_INVALID_ARGUMENT);
    return status.message();
  }

  Manifest manifest;
  MoeTensor tensors[4];
};

TEST_F(RunArguments, ValidTensorsPass) {
  EXPECT_EQ(check(), "");
  tensors[0].dims[0] = tensors[2].dims[0] = 1;
  EXPECT_EQ(check(1), "");
  tensors[0].dims[0] = tensors[2].dims[0] = 64;
  EXPECT_EQ(check(64), "");
}

TEST_F(RunArguments, TokenRange) {
  EXPECT_EQ(check(0), "T=0 is outside [1, 64]");
  EXPECT_EQ(check(-3), "T=-3 is outside [1, 64]");
  EXPECT_EQ(check(65), "T=65 is outside [1, 64]");
}

TEST_F(RunArguments, TensorCount) {
  EXPECT_EQ(check(16, 3), "expected 4 tensors, got 3");
  EXPECT_EQ(check(16, 5), "expected 4 tensors, got 5");
  EXPECT_EQ(checkRunArguments(manifest, 16, nullptr, 4).message(),
            "the tensor array is null");
}

TEST_F(RunArguments, ElementTypes) {
  tensors[2].dtype = MOE_DTYPE_F16;
  EXPECT_EQ(check(), "tensor 2 ('weights'): element type is f16, expected "
                     "bf16");
  tensors[2].dtype = 42;
  EXPECT_EQ(check(), "tensor 2 ('weights'): element type is ?, expected bf16");
}

TEST_F(RunArguments, RankAndDimsAtT) {
  tensors[1].rank = 2;
  EXPECT_EQ(check(), "tensor 1 ('bias'): rank is 2, expected 1");
  tensors[1].rank = 1;
  tensors[3].rank = -1;
  EXPECT_EQ(check(), "tensor 3 ('count'): rank is -1, expected 0");
  tensors[3].rank = 0;
  EXPECT_EQ(check(17), "tensor 0 ('logits'): dims are [16, 256], expected "
                       "[17, 256] at T=17");
  tensors[0].dims[1] = 255;
  EXPECT_EQ(check(), "tensor 0 ('logits'): dims are [16, 255], expected "
                     "[16, 256] at T=16");
}

TEST_F(RunArguments, Pointers) {
  tensors[3].data = nullptr;
  EXPECT_EQ(check(), "tensor 3 ('count'): null pointer");
  tensors[3].data = fakePointer(0x4000);
  tensors[1].data = fakePointer(0x2008);
  EXPECT_EQ(check(),
            "tensor 1 ('bias'): pointer 0x2008 is not 16-byte aligned");
}

bool driverPresent() {
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library)
    dlclose(library);
  return library != nullptr;
}

const char *const kNoDriver = "CUDA driver not available: libcuda.so.1: "
                              "cannot open shared object file";

class NoDriver : public ::testing::Test {
protected:
  void SetUp() override {
    if (driverPresent())
      GTEST_SKIP() << "libcuda.so.1 is present";
    bundle.write("manifest.txt", kManifest);
    bundle.write("kernels.cubin", "\x7f"
                                  "ELF");
  }

  TempBundle bundle;
};

TEST_F(NoDriver, OpeningIsAnError) {
  // Twice: the failed load is remembered, not retried into a crash.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<Bundle> opened;
    Status status = Bundle::open(bundle.path, 0, opened);
    EXPECT_EQ(status.code(), MOE_ERROR_DRIVER_UNAVAILABLE);
    EXPECT_EQ(status.message().rfind(kNoDriver, 0), 0u) << status.message();
    EXPECT_EQ(opened, nullptr);
  }
}

TEST_F(NoDriver, BundleErrorsComeFirst) {
  bundle.write("manifest.txt", "moe-bundle 4\n");
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(bundle.path, 0, opened);
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  EXPECT_EQ(status.message(),
            bundle.path + "/manifest.txt:1: unsupported bundle format version "
                          "'4'; this runtime reads versions 1 to 3: "
                          "recompile the bundle with moe-compile");
}

TEST_F(NoDriver, CApi) {
  MoeBundle *handle = reinterpret_cast<MoeBundle *>(&bundle);
  char message[256];
  EXPECT_EQ(moe_bundle_open(bundle.path.c_str(), 0, &handle, message,
                            sizeof(message)),
            MOE_ERROR_DRIVER_UNAVAILABLE);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(std::string(message).rfind(kNoDriver, 0), 0u) << message;

  // The message is truncated to the buffer, which may also be absent.
  char shortMessage[9];
  EXPECT_EQ(moe_bundle_open(bundle.path.c_str(), 0, &handle, shortMessage,
                            sizeof(shortMessage)),
            MOE_ERROR_DRIVER_UNAVAILABLE);
  EXPECT_STREQ(shortMessage, "CUDA dri");
  EXPECT_EQ(moe_bundle_open(bundle.path.c_str(), 0, &handle, nullptr, 0),
            MOE_ERROR_DRIVER_UNAVAILABLE);
}

TEST_F(NoDriver, DeviceMemory) {
  void *pointer = &bundle;
  char message[256];
  EXPECT_EQ(moe_device_alloc(0, 64, &pointer, message, sizeof(message)),
            MOE_ERROR_DRIVER_UNAVAILABLE);
  EXPECT_EQ(pointer, nullptr);
  EXPECT_EQ(std::string(message).rfind(kNoDriver, 0), 0u) << message;
  EXPECT_EQ(moe_device_synchronize(0, message, sizeof(message)),
            MOE_ERROR_DRIVER_UNAVAILABLE);
}

TEST(CApi, NullArguments) {
  char message[128];
  EXPECT_EQ(moe_device_alloc(0, 8, nullptr, message, sizeof(message)),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_device_upload(0, nullptr, message, 8, message, sizeof(message)),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(message, "a copy's pointer is null");
  // Freeing null is a no-op, as with free().
  EXPECT_EQ(moe_device_free(0, nullptr, message, sizeof(message)), MOE_OK);
  EXPECT_EQ(moe_bundle_open(nullptr, 0, nullptr, message, sizeof(message)),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(message, "the bundle handle pointer is null");
  MoeBundle *handle = nullptr;
  EXPECT_EQ(moe_bundle_open(nullptr, 0, &handle, message, sizeof(message)),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(message, "the bundle path is null");
  EXPECT_EQ(
      moe_bundle_run(nullptr, 1, nullptr, 0, nullptr, message, sizeof(message)),
      MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(message, "the bundle is null");
  MoeTensorInfo info;
  EXPECT_EQ(
      moe_bundle_tensor_info(nullptr, 0, 1, &info, message, sizeof(message)),
      MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(moe_bundle_num_tensors(nullptr), 0);
  EXPECT_EQ(moe_bundle_tokens_max(nullptr), 0);
  EXPECT_EQ(moe_bundle_num_variants(nullptr), 0);
  EXPECT_EQ(moe_bundle_variant_max_tokens(nullptr, 0), 0);
  int variant = 5;
  EXPECT_EQ(moe_bundle_variant_for_tokens(nullptr, 1, &variant, message,
                                          sizeof(message)),
            MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(message, "the bundle is null");
  EXPECT_EQ(variant, 5);
  const void *slices[1] = {nullptr};
  EXPECT_EQ(
      moe_bundle_bind_peers(nullptr, 0, slices, 1, message, sizeof(message)),
      MOE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(message, "the bundle is null");
  moe_bundle_close(nullptr);
}

TEST(CApi, MissingBundle) {
  MoeBundle *handle = nullptr;
  char message[256];
  EXPECT_EQ(moe_bundle_open("/nonexistent/layer.moeb", 0, &handle, message,
                            sizeof(message)),
            MOE_ERROR_INVALID_BUNDLE);
  EXPECT_STREQ(message, "cannot open /nonexistent/layer.moeb/manifest.txt: No "
                        "such file or directory");
  EXPECT_EQ(handle, nullptr);
}

} // namespace
