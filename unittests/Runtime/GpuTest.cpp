//===- GpuTest.cpp - A bundle of small PTX kernels run on the GPU ---------===//
//
// Runs a hand-written bundle on device 0 (skipped without a driver or on a
// GPU older than Hopper): the PTX fallback when the cubin does not load,
// pointer, i32 and i64 arguments, zero fills sized at T, a launch skipped at
// grid size zero, more than 48 KiB of dynamic shared memory, a cluster
// launch, a tensor map passed by value, the caller's context left as it was,
// argument errors that enqueue nothing, no allocation once the tensor maps
// exist, a run captured in a CUDA graph, a format version 2 bundle whose
// runs execute the variant of their T (through the C API), a format version
// 3 bundle whose dependent launches overlap the launch before them yet see
// its writes (eagerly and in a CUDA graph, a cluster launch among them), and
// launch plainly under MOE_DEPENDENT_LAUNCH=0, the PTX fallback from a cubin
// too large to read, and launches and tensor map boxes beyond the device
// refused before anything is enqueued.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "Manifest.h"
#include "TempBundle.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

using namespace moe::runtime;

/// Counts the program's allocations through operator new, so that a test can
/// check that a steady-state run allocates nothing.
static std::atomic<int64_t> allocations{0};

void *operator new(std::size_t size) {
  ++allocations;
  if (void *memory = std::malloc(size ? size : 1))
    return memory;
  std::abort();
}

void operator delete(void *memory) noexcept { std::free(memory); }

void operator delete(void *memory, std::size_t) noexcept { std::free(memory); }

namespace {

/// The driver functions the test needs beyond the runtime's.
#define TEST_DRIVER_FUNCTIONS(X)                                               \
  X(ctxSetCurrent, cuCtxSetCurrent)                                            \
  X(ctxSynchronize, cuCtxSynchronize)                                          \
  X(memcpyHtoD, cuMemcpyHtoD_v2)                                               \
  X(memcpyDtoH, cuMemcpyDtoH_v2)                                               \
  X(streamCreate, cuStreamCreate)                                              \
  X(streamDestroy, cuStreamDestroy_v2)                                         \
  X(streamSynchronize, cuStreamSynchronize)                                    \
  X(streamBeginCapture, cuStreamBeginCapture_v2)                               \
  X(streamEndCapture, cuStreamEndCapture)                                      \
  X(graphInstantiate, cuGraphInstantiateWithFlags)                             \
  X(graphLaunch, cuGraphLaunch)                                                \
  X(graphExecDestroy, cuGraphExecDestroy)                                      \
  X(graphDestroy, cuGraphDestroy)

struct TestDriver {
#define TEST_DRIVER_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  TEST_DRIVER_FUNCTIONS(TEST_DRIVER_MEMBER)
#undef TEST_DRIVER_MEMBER
};

/// The kernels: add_scalar (dst = src + k for n i64 elements), mark (one
/// atomic add per block), big_smem (stores through 100 000 bytes of dynamic
/// shared memory), cluster_rank (each block's rank in its cluster),
/// copy_map (copies its by-value CUtensorMap parameter out), and two that
/// run as programmatic dependents: slow_write (waits for the grids before
/// it, lets its dependents launch, then 200 us later adds 1 to stamps[0]
/// and stores the time in stamps[1]) and read_after (stores in stamps[3]
/// the time its block 0 started, waits, then copies stamps[0] to
/// stamps[2]).
std::string kernelsPtx(int computeCapability) {
  std::string ptx =
      ".version 8.0\n.target sm_" + std::to_string(computeCapability) + R"(
.address_size 64
.extern .shared .align 16 .b8 dsmem[];

.visible .entry add_scalar(.param .u64 dst, .param .u64 src, .param .u32 n,
                           .param .u64 k) {
  .reg .pred %p;
  .reg .b32 %r<5>;
  .reg .b64 %rd<9>;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.lo.u32 %r4, %r1, %r2, %r3;
  ld.param.u32 %r1, [n];
  setp.ge.u32 %p, %r4, %r1;
  @%p bra DONE;
  ld.param.u64 %rd1, [dst];
  ld.param.u64 %rd2, [src];
  ld.param.u64 %rd3, [k];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mul.wide.u32 %rd4, %r4, 8;
  add.u64 %rd5, %rd2, %rd4;
  ld.global.u64 %rd6, [%rd5];
  add.u64 %rd6, %rd6, %rd3;
  add.u64 %rd7, %rd1, %rd4;
  st.global.u64 [%rd7], %rd6;
DONE:
  ret;
}

.visible .entry mark(.param .u64 marks) {
  .reg .pred %p;
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  ld.param.u64 %rd1, [marks];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r2, 1;
  red.global.add.u32 [%rd1], %r2;
DONE:
  ret;
}

.visible .entry big_smem(.param .u64 out) {
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  mov.u32 %r2, dsmem;
  add.u32 %r2, %r2, 100000;
  mov.u32 %r3, 42;
  st.shared.u32 [%r2], %r3;
  ld.shared.u32 %r3, [%r2];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  st.global.u32 [%rd1], %r3;
DONE:
  ret;
}

.visible .entry cluster_rank(.param .u64 ranks) {
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  mov.u32 %r2, %cluster_ctarank;
  mov.u32 %r3, %ctaid.x;
  ld.param.u64 %rd1, [ranks];
  cvta.to.global.u64 %rd1, %rd1;
  mul.wide.u32 %rd2, %r3, 4;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
DONE:
  ret;
}

.visible .entry copy_map(.param .u64 out, .param .align 64 .b8 map[128]) {
  .reg .pred %p;
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
)";
  for (int i = 0; i < 16; ++i) {
    std::string offset = std::to_string(8 * i);
    ptx += "  ld.param.u64 %rd2, [map+" + offset + "];\n";
    ptx += "  st.global.u64 [%rd1+" + offset + "], %rd2;\n";
  }
  ptx += "DONE:\n  ret;\n}\n";
  return ptx + R"(
.visible .entry slow_write(.param .u64 stamps) {
  .reg .pred %p;
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  griddepcontrol.wait;
  griddepcontrol.launch_dependents;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  ld.param.u64 %rd1, [stamps];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u64 %rd2, %globaltimer;
  add.u64 %rd3, %rd2, 200000;
SPIN:
  mov.u64 %rd4, %globaltimer;
  setp.lt.u64 %p, %rd4, %rd3;
  @%p bra SPIN;
  ld.global.u64 %rd5, [%rd1];
  add.u64 %rd5, %rd5, 1;
  st.global.u64 [%rd1], %rd5;
  mov.u64 %rd4, %globaltimer;
  st.global.u64 [%rd1+8], %rd4;
DONE:
  ret;
}

.visible .entry read_after(.param .u64 stamps) {
  .reg .pred %p;
  .reg .b32 %r<3>;
  .reg .b64 %rd<4>;
  mov.u64 %rd2, %globaltimer;
  griddepcontrol.wait;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  or.b32 %r1, %r1, %r2;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  ld.param.u64 %rd1, [stamps];
  cvta.to.global.u64 %rd1, %rd1;
  ld.global.u64 %rd3, [%rd1];
  st.global.u64 [%rd1+16], %rd3;
  st.global.u64 [%rd1+24], %rd2;
DONE:
  ret;
}
)";
}

std::string manifest(int computeCapability) {
  return "moe-bundle 1\ntarget sm_" + std::to_string(computeCapability) +
         R"(
module kernels.cubin kernels.ptx
tokens-max 64
tensor src       input  i64 T 2
tensor dst       output i64 T 2
tensor marks     output i32 4
tensor smem_out  output i32 1
tensor ranks     output i32 4
tensor map_bytes output u8 128
tensor zeroed    output u8 T 32
workspace scratch i32 T
zero marks
zero zeroed
zero scratch
tensormap src_map src i64 rank 2 dims 2 T strides 16 box 2 4 swizzle 0
launch add_scalar grid cdiv(T*2,64) 1 1 block 64 1 1 smem 0 args dst src i32:T*2 i64:T*4294967296+7
launch mark grid cdiv(T,4)-1 1 1 block 32 1 1 smem 0 args marks
launch big_smem grid 1 1 1 block 32 1 1 smem 102400 args smem_out
launch cluster_rank grid 4 1 1 block 32 1 1 smem 0 cluster 2 1 1 args ranks
launch copy_map grid 1 1 1 block 32 1 1 smem 0 args map_bytes map:src_map
)";
}

/// Two variants over the same kernels. T <= 8: dst = src + 11 through the
/// workspace `scratch`, no mark, a tensor map with boxes of 1 row. 8 < T <=
/// 64: dst = src + 22 through a larger `scratch` (the same allocation), 3
/// marks, boxes of 4 rows. Both zero the marks.
std::string variantsManifest(int computeCapability) {
  return "moe-bundle 2\ntarget sm_" + std::to_string(computeCapability) +
         R"(
module kernels.cubin kernels.ptx
tokens-max 64
tensor src       input  i64 T 2
tensor dst       output i64 T 2
tensor marks     output i32 4
tensor map_bytes output u8 128
variant 8
workspace scratch i64 T 2
zero marks
tensormap src_map src i64 rank 2 dims 2 T strides 16 box 2 1 swizzle 0
launch add_scalar grid cdiv(T*2,64) 1 1 block 64 1 1 smem 0 args scratch src i32:T*2 i64:1
launch add_scalar grid cdiv(T*2,64) 1 1 block 64 1 1 smem 0 args dst scratch i32:T*2 i64:10
launch copy_map grid 1 1 1 block 32 1 1 smem 0 args map_bytes map:src_map
variant 64
workspace scratch i64 T*2 2
zero marks
tensormap src_map src i64 rank 2 dims 2 T strides 16 box 2 4 swizzle 0
launch add_scalar grid cdiv(T*2,64) 1 1 block 64 1 1 smem 0 args scratch src i32:T*2 i64:2
launch add_scalar grid cdiv(T*2,64) 1 1 block 64 1 1 smem 0 args dst scratch i32:T*2 i64:20
launch mark grid 3 1 1 block 32 1 1 smem 0 args marks
launch copy_map grid 1 1 1 block 32 1 1 smem 0 args map_bytes map:src_map
)";
}

/// Format version 3: slow_write, then read_after in clusters of two, each
/// a programmatic dependent of the launch before it.
std::string dependentManifest(int computeCapability) {
  return "moe-bundle 3\ntarget sm_" + std::to_string(computeCapability) +
         R"(
module kernels.cubin kernels.ptx
tokens-max 64
tensor stamps output i64 4
variant 64
zero stamps
launch slow_write grid 1 1 1 block 32 1 1 smem 0 dependent args stamps
launch read_after grid 2 1 1 block 32 1 1 smem 0 cluster 2 1 1 dependent args stamps
)";
}

class Gpu : public ::testing::Test {
protected:
  static constexpr int64_t kTokensMax = 64;
  static constexpr int kNumTensors = 7;

  void SetUp() override {
    if (!getDriver(driver).ok())
      GTEST_SKIP() << "no CUDA driver";
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr);
#define TEST_DRIVER_LOOKUP(member, symbol)                                     \
  test.member =                                                                \
      reinterpret_cast<decltype(test.member)>(dlsym(library, #symbol));        \
  ASSERT_NE(test.member, nullptr) << #symbol;
    TEST_DRIVER_FUNCTIONS(TEST_DRIVER_LOOKUP)
#undef TEST_DRIVER_LOOKUP

    int major = 0, minor = 0;
    ASSERT_EQ(driver->deviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(driver->deviceGetAttribute(
                  &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
              CUDA_SUCCESS);
    ASSERT_EQ(driver->deviceGetAttribute(
                  &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
              CUDA_SUCCESS);
    if (major < 9)
      GTEST_SKIP() << "the kernels use clusters, which need sm_90";
    computeCapability = 10 * major + minor;

    // Like PyTorch, the caller works in the device's primary context.
    ASSERT_EQ(driver->primaryCtxRetain(&context, device), CUDA_SUCCESS);
    ASSERT_EQ(test.ctxSetCurrent(context), CUDA_SUCCESS);
    for (int i = 0; i < kNumTensors; ++i)
      ASSERT_EQ(driver->memAlloc(&buffers[i], kBufferBytes), CUDA_SUCCESS);

    // An unloadable cubin, so that the runtime falls back to the PTX.
    bundle.write("kernels.cubin", "not a cubin");
    bundle.write("kernels.ptx", kernelsPtx(computeCapability));
    bundle.write("manifest.txt", manifest(computeCapability));
  }

  void TearDown() override {
    if (!context)
      return;
    for (CUdeviceptr buffer : buffers)
      if (buffer)
        driver->memFree(buffer);
    driver->primaryCtxRelease(device);
  }

  /// The tensors at T = `tokens`, in declaration order.
  std::vector<MoeTensor> tensors(int64_t tokens) const {
    auto tensor = [&](int index, MoeDtype dtype, int rank, int64_t dim0,
                      int64_t dim1) {
      return MoeTensor{
          reinterpret_cast<void *>(buffers[index]), dtype, rank, {dim0, dim1}};
    };
    return {tensor(0, MOE_DTYPE_I64, 2, tokens, 2),
            tensor(1, MOE_DTYPE_I64, 2, tokens, 2),
            tensor(2, MOE_DTYPE_I32, 1, 4, 0),
            tensor(3, MOE_DTYPE_I32, 1, 1, 0),
            tensor(4, MOE_DTYPE_I32, 1, 4, 0),
            tensor(5, MOE_DTYPE_U8, 1, 128, 0),
            tensor(6, MOE_DTYPE_U8, 2, tokens, 32)};
  }

  template <typename T> std::vector<T> read(int index, size_t count) {
    std::vector<T> values(count);
    EXPECT_EQ(test.memcpyDtoH(values.data(), buffers[index], count * sizeof(T)),
              CUDA_SUCCESS);
    return values;
  }

  /// Fills the inputs and poisons the outputs.
  void fill() {
    std::vector<int64_t> source(2 * kTokensMax);
    for (size_t i = 0; i < source.size(); ++i)
      source[i] = 1000 * static_cast<int64_t>(i);
    ASSERT_EQ(test.memcpyHtoD(buffers[0], source.data(), 16 * kTokensMax),
              CUDA_SUCCESS);
    std::vector<uint8_t> poison(kBufferBytes, 0xab);
    for (int i = 1; i < kNumTensors; ++i)
      ASSERT_EQ(test.memcpyHtoD(buffers[i], poison.data(), kBufferBytes),
                CUDA_SUCCESS);
    // Copies from pageable memory may still be in flight on return.
    ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
  }

  /// Runs the bundle at T = 5 on filled tensors and expects the run refused
  /// with `code` and `message`, having enqueued nothing: the zero fill of
  /// tensor 6 did not happen.
  void expectRefusedRun(Bundle &opened, std::vector<MoeTensor> &arguments,
                        MoeStatusCode code, const std::string &message) {
    Status status = opened.run(5, arguments.data(), kNumTensors, nullptr);
    EXPECT_EQ(status.code(), code);
    EXPECT_EQ(status.message(), message);
    ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(read<uint8_t>(6, 1)[0], 0xab);
  }

  /// Checks the outputs of a finished run at T = `tokens`.
  void expectResults(int64_t tokens) {
    std::vector<int64_t> dst = read<int64_t>(1, 2 * kTokensMax);
    for (int64_t i = 0; i < 2 * kTokensMax; ++i)
      EXPECT_EQ(dst[i], i < 2 * tokens ? 1000 * i + (tokens << 32) + 7
                                       : int64_t(0xabababababababab))
          << "dst[" << i << "] at T=" << tokens;
    int64_t blocks = (tokens + 3) / 4 - 1;
    EXPECT_EQ(read<int32_t>(2, 1)[0], blocks) << "marks at T=" << tokens;
    EXPECT_EQ(read<int32_t>(3, 1)[0], 42);
    EXPECT_EQ(read<int32_t>(4, 4), (std::vector<int32_t>{0, 1, 0, 1}));

    std::vector<uint8_t> zeroed = read<uint8_t>(6, 32 * kTokensMax);
    for (int64_t i = 0; i < 32 * kTokensMax; ++i)
      ASSERT_EQ(zeroed[i], i < 32 * tokens ? 0 : 0xab)
          << "zeroed[" << i << "] at T=" << tokens;
    expectSrcMap(tokens, 4);
  }

  /// Checks that copy_map wrote the tensor map over src at T = `tokens`,
  /// with boxes of `boxRows` rows.
  void expectSrcMap(int64_t tokens, cuuint32_t boxRows) {
    CUtensorMap expected;
    cuuint64_t dims[] = {2, static_cast<cuuint64_t>(tokens)}, strides[] = {16};
    cuuint32_t box[] = {2, boxRows}, elementStrides[] = {1, 1};
    ASSERT_EQ(driver->tensorMapEncodeTiled(
                  &expected, CU_TENSOR_MAP_DATA_TYPE_INT64, 2,
                  reinterpret_cast<void *>(buffers[0]), dims, strides, box,
                  elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_NONE,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              CUDA_SUCCESS);
    std::vector<uint8_t> map = read<uint8_t>(5, sizeof(expected));
    EXPECT_EQ(std::memcmp(map.data(), &expected, sizeof(expected)), 0)
        << "the tensor map at T=" << tokens;
  }

  /// The tensors of variantsManifest at T = `tokens`.
  std::array<MoeTensor, 4> variantTensors(int64_t tokens) const {
    std::vector<MoeTensor> all = tensors(tokens);
    return {all[0], all[1], all[2], all[5]};
  }

  /// Runs dependentManifest's bundle once, opened with MOE_DEPENDENT_LAUNCH
  /// set to `setting` (unset for null), eagerly or replayed from a CUDA
  /// graph; returns its four stamps.
  std::vector<int64_t> runDependent(const char *setting, bool graph) {
    std::unique_ptr<Bundle> opened;
    {
      const char *previous = std::getenv("MOE_DEPENDENT_LAUNCH");
      std::string saved = previous ? previous : "";
      if (setting)
        setenv("MOE_DEPENDENT_LAUNCH", setting, 1);
      else
        unsetenv("MOE_DEPENDENT_LAUNCH");
      Status status = Bundle::open(bundle.path, 0, opened);
      if (previous)
        setenv("MOE_DEPENDENT_LAUNCH", saved.c_str(), 1);
      else
        unsetenv("MOE_DEPENDENT_LAUNCH");
      EXPECT_TRUE(status.ok()) << status.message();
      if (!status.ok())
        return {};
    }
    MoeTensor stamps{
        reinterpret_cast<void *>(buffers[0]), MOE_DTYPE_I64, 1, {4}};
    CUstream stream = nullptr;
    EXPECT_EQ(test.streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    if (!graph) {
      Status status = opened->run(1, &stamps, 1, stream);
      EXPECT_TRUE(status.ok()) << status.message();
    } else {
      EXPECT_EQ(test.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
                CUDA_SUCCESS);
      Status status = opened->run(1, &stamps, 1, stream);
      CUgraph captured = nullptr;
      EXPECT_EQ(test.streamEndCapture(stream, &captured), CUDA_SUCCESS);
      EXPECT_TRUE(status.ok()) << status.message();
      CUgraphExec executable = nullptr;
      EXPECT_EQ(test.graphInstantiate(&executable, captured, 0), CUDA_SUCCESS);
      EXPECT_EQ(test.graphLaunch(executable, stream), CUDA_SUCCESS);
      EXPECT_EQ(test.streamSynchronize(stream), CUDA_SUCCESS);
      test.graphExecDestroy(executable);
      test.graphDestroy(captured);
    }
    EXPECT_EQ(test.streamSynchronize(stream), CUDA_SUCCESS);
    test.streamDestroy(stream);
    return read<int64_t>(0, 4);
  }

  static constexpr size_t kBufferBytes = 32 * kTokensMax;

  const Driver *driver = nullptr;
  TestDriver test;
  CUdevice device = 0;
  CUcontext context = nullptr;
  int computeCapability = 0;
  CUdeviceptr buffers[kNumTensors] = {};
  TempBundle bundle;
};

TEST_F(Gpu, DeviceMemoryRoundTrip) {
  std::vector<int32_t> source(1000), back(1000, -1);
  for (size_t i = 0; i < source.size(); ++i)
    source[i] = static_cast<int32_t>(i * 7 - 3);
  void *pointer = nullptr;
  size_t bytes = source.size() * sizeof(int32_t);
  ASSERT_TRUE(allocateDevice(0, bytes, pointer).ok());
  ASSERT_NE(pointer, nullptr);
  EXPECT_TRUE(copyToDevice(0, pointer, source.data(), bytes).ok());
  EXPECT_TRUE(synchronizeDevice(0).ok());
  EXPECT_TRUE(copyToHost(0, back.data(), pointer, bytes).ok());
  EXPECT_EQ(back, source);
  EXPECT_TRUE(freeDevice(0, pointer).ok());
}

TEST_F(Gpu, RunsThePlan) {
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(bundle.path, 0, opened);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(opened->numTensors(), kNumTensors);
  MoeTensorInfo info;
  ASSERT_TRUE(opened->tensorInfo(6, 5, info).ok());
  EXPECT_STREQ(info.name, "zeroed");
  EXPECT_EQ(info.role, MOE_ROLE_OUTPUT);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.dims[0], 5);
  EXPECT_EQ(info.dims[1], 32);

  for (int64_t tokens : {int64_t(5), int64_t(1), kTokensMax, int64_t(5)}) {
    fill();
    std::vector<MoeTensor> arguments = tensors(tokens);
    status = opened->run(tokens, arguments.data(), kNumTensors, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
    expectResults(tokens);
  }
}

TEST_F(Gpu, SteadyStateAllocatesNothing) {
  std::unique_ptr<Bundle> opened;
  ASSERT_TRUE(Bundle::open(bundle.path, 0, opened).ok());
  fill();
  std::vector<MoeTensor> arguments = tensors(9);
  ASSERT_TRUE(opened->run(9, arguments.data(), kNumTensors, nullptr).ok());
  int64_t before = allocations;
  for (int repeat = 0; repeat < 3; ++repeat)
    ASSERT_TRUE(opened->run(9, arguments.data(), kNumTensors, nullptr).ok());
  EXPECT_EQ(allocations - before, 0);
  ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
}

TEST_F(Gpu, LeavesTheCallersContext) {
  std::unique_ptr<Bundle> opened;
  ASSERT_TRUE(Bundle::open(bundle.path, 0, opened).ok());
  fill();
  ASSERT_EQ(test.ctxSetCurrent(nullptr), CUDA_SUCCESS);
  std::vector<MoeTensor> arguments = tensors(9);
  Status status = opened->run(9, arguments.data(), kNumTensors, nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  CUcontext current = context;
  ASSERT_EQ(driver->ctxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
  ASSERT_EQ(test.ctxSetCurrent(context), CUDA_SUCCESS);
  ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
  expectResults(9);
}

TEST_F(Gpu, ArgumentErrorsEnqueueNothing) {
  std::unique_ptr<Bundle> opened;
  ASSERT_TRUE(Bundle::open(bundle.path, 0, opened).ok());
  fill();
  std::vector<MoeTensor> arguments = tensors(5);
  arguments[6].dims[0] = 6;
  expectRefusedRun(*opened, arguments, MOE_ERROR_INVALID_ARGUMENT,
                   "tensor 6 ('zeroed'): dims are [6, 32], expected [5, 32] "
                   "at T=5");
}

TEST_F(Gpu, CapturesInAGraph) {
  std::unique_ptr<Bundle> opened;
  ASSERT_TRUE(Bundle::open(bundle.path, 0, opened).ok());
  CUstream stream = nullptr;
  ASSERT_EQ(test.streamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::vector<MoeTensor> arguments = tensors(9);
  ASSERT_EQ(test.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS);
  Status status = opened->run(9, arguments.data(), kNumTensors, stream);
  CUgraph graph = nullptr;
  ASSERT_EQ(test.streamEndCapture(stream, &graph), CUDA_SUCCESS);
  ASSERT_TRUE(status.ok()) << status.message();
  CUgraphExec executable = nullptr;
  ASSERT_EQ(test.graphInstantiate(&executable, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 2; ++replay) {
    fill();
    ASSERT_EQ(test.graphLaunch(executable, stream), CUDA_SUCCESS);
    ASSERT_EQ(test.streamSynchronize(stream), CUDA_SUCCESS);
    expectResults(9);
  }
  test.graphExecDestroy(executable);
  test.graphDestroy(graph);
  test.streamDestroy(stream);
}

TEST_F(Gpu, RunsTheVariantForT) {
  bundle.write("manifest.txt", variantsManifest(computeCapability));
  MoeBundle *opened = nullptr;
  char message[512];
  ASSERT_EQ(moe_bundle_open(bundle.path.c_str(), 0, &opened, message,
                            sizeof(message)),
            MOE_OK)
      << message;
  EXPECT_EQ(moe_bundle_num_variants(opened), 2);
  EXPECT_EQ(moe_bundle_variant_max_tokens(opened, 0), 8);
  EXPECT_EQ(moe_bundle_variant_max_tokens(opened, 1), 64);
  EXPECT_EQ(moe_bundle_variant_max_tokens(opened, 2), 0);

  // Each side of the bound, both ends, and back.
  for (int64_t tokens : {8, 9, 1, 64, 8}) {
    int expected = tokens <= 8 ? 0 : 1;
    int variant = -1;
    ASSERT_EQ(moe_bundle_variant_for_tokens(opened, tokens, &variant, message,
                                            sizeof(message)),
              MOE_OK)
        << message;
    EXPECT_EQ(variant, expected) << "T=" << tokens;
    fill();
    std::array<MoeTensor, 4> arguments = variantTensors(tokens);
    ASSERT_EQ(moe_bundle_run(opened, tokens, arguments.data(), 4, nullptr,
                             message, sizeof(message)),
              MOE_OK)
        << message;
    ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
    int64_t added = expected == 0 ? 11 : 22;
    std::vector<int64_t> dst = read<int64_t>(1, 2 * kTokensMax);
    for (int64_t i = 0; i < 2 * kTokensMax; ++i)
      ASSERT_EQ(dst[i],
                i < 2 * tokens ? 1000 * i + added : int64_t(0xabababababababab))
          << "dst[" << i << "] at T=" << tokens;
    EXPECT_EQ(read<int32_t>(2, 1)[0], expected == 0 ? 0 : 3)
        << "marks at T=" << tokens;
    expectSrcMap(tokens, expected == 0 ? 1 : 4);
  }

  // Switching variants allocates nothing once their tensor maps exist.
  std::array<MoeTensor, 4> small = variantTensors(8), large = variantTensors(9);
  int64_t before = allocations;
  for (int repeat = 0; repeat < 2; ++repeat) {
    ASSERT_EQ(moe_bundle_run(opened, 8, small.data(), 4, nullptr, message,
                             sizeof(message)),
              MOE_OK)
        << message;
    ASSERT_EQ(moe_bundle_run(opened, 9, large.data(), 4, nullptr, message,
                             sizeof(message)),
              MOE_OK)
        << message;
  }
  EXPECT_EQ(allocations - before, 0);
  ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
  moe_bundle_close(opened);
}

TEST_F(Gpu, DependentLaunchesOverlapAndWait) {
  // read_after starts while slow_write spins (its launch overlaps), yet
  // reads slow_write's write: its wait waited for all of slow_write, and
  // slow_write's for the zero fill.
  bundle.write("manifest.txt", dependentManifest(computeCapability));
  for (bool graph : {false, true}) {
    std::vector<int64_t> stamps = runDependent(nullptr, graph);
    ASSERT_EQ(stamps.size(), 4u);
    const char *where = graph ? " (CUDA graph)" : " (stream)";
    EXPECT_EQ(stamps[0], 1) << where;
    EXPECT_EQ(stamps[2], 1)
        << "read_after read before slow_write's write" << where;
    EXPECT_LT(stamps[3], stamps[1])
        << "read_after started only after slow_write finished: not launched "
           "as a programmatic dependent"
        << where;
  }
}

TEST_F(Gpu, DependentLaunchesCanBeTurnedOff) {
  // MOE_DEPENDENT_LAUNCH=0: plain launches, each after the one before.
  bundle.write("manifest.txt", dependentManifest(computeCapability));
  for (bool graph : {false, true}) {
    std::vector<int64_t> stamps = runDependent("0", graph);
    ASSERT_EQ(stamps.size(), 4u);
    const char *where = graph ? " (CUDA graph)" : " (stream)";
    EXPECT_EQ(stamps[2], 1) << where;
    EXPECT_GE(stamps[3], stamps[1])
        << "read_after started before slow_write finished" << where;
  }
}

TEST_F(Gpu, RefusesAnotherComputeCapability) {
  std::string text = manifest(computeCapability);
  text.replace(text.find("target sm_"), 12, "target sm_75");
  bundle.write("manifest.txt", text);
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(bundle.path, 0, opened);
  EXPECT_EQ(status.code(), MOE_ERROR_UNSUPPORTED_DEVICE);
  EXPECT_NE(status.message().find("targets sm_75 (compute capability 7.5)"),
            std::string::npos)
      << status.message();
}

TEST_F(Gpu, ReportsAMissingKernel) {
  bundle.write("manifest.txt", manifest(computeCapability) +
                                   "launch nothing grid 1 1 1 block 1 1 1 "
                                   "smem 0 args\n");
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(bundle.path, 0, opened);
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  EXPECT_EQ(status.message(),
            "launch 5 of 'nothing' (line 22): kernel 'nothing' is not in "
            "kernels.ptx");
}

TEST_F(Gpu, RefusesLaunchesBeyondTheDevice) {
  // More threads than a block has: a run refuses it before the zero fills,
  // which a CUDA error at the launch would have left enqueued.
  bundle.write("manifest.txt", manifest(computeCapability) +
                                   "launch mark grid 1 1 1 block 2048 1 1 "
                                   "smem 0 args marks\n");
  std::unique_ptr<Bundle> opened;
  ASSERT_TRUE(Bundle::open(bundle.path, 0, opened).ok());
  fill();
  std::vector<MoeTensor> arguments = tensors(5);
  expectRefusedRun(*opened, arguments, MOE_ERROR_INVALID_BUNDLE,
                   "launch 5 of 'mark' (line 22): block x 2048 exceeds the "
                   "device's 1024 at T=5");

  // More shared memory than a block can have: refused when the bundle
  // opens, for the largest T.
  bundle.write("manifest.txt", manifest(computeCapability) +
                                   "launch big_smem grid 1 1 1 block 32 1 1 "
                                   "smem 1048576 args smem_out\n");
  Status status = Bundle::open(bundle.path, 0, opened);
  EXPECT_EQ(status.code(), MOE_ERROR_INVALID_BUNDLE);
  EXPECT_NE(status.message().find("launch 5 of 'big_smem' (line 22): smem "
                                  "1048576 at T=64 and the kernel's 0 static "
                                  "bytes exceed the device's "),
            std::string::npos)
      << status.message();
}

TEST_F(Gpu, RefusesTensorMapBoxesBeyondTma) {
  std::string text = manifest(computeCapability);
  text.replace(text.find("box 2 4"), 7, "box 2 300");
  bundle.write("manifest.txt", text);
  std::unique_ptr<Bundle> opened;
  ASSERT_TRUE(Bundle::open(bundle.path, 0, opened).ok());
  fill();
  std::vector<MoeTensor> arguments = tensors(5);
  expectRefusedRun(*opened, arguments, MOE_ERROR_INVALID_BUNDLE,
                   "tensor map 'src_map': box size 1 is 300, outside [1, 256] "
                   "at T=5");
}

TEST_F(Gpu, FallsBackToPtxFromACubinTooLargeToRead) {
  std::string cubin = bundle.path + "/kernels.cubin";
  ASSERT_EQ(truncate(cubin.c_str(), kMaxModuleBytes + 1), 0);
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(bundle.path, 0, opened);
  ASSERT_TRUE(status.ok()) << status.message();
  fill();
  std::vector<MoeTensor> arguments = tensors(5);
  ASSERT_TRUE(opened->run(5, arguments.data(), kNumTensors, nullptr).ok());
  ASSERT_EQ(test.ctxSynchronize(), CUDA_SUCCESS);
  expectResults(5);
}

TEST_F(Gpu, ReportsBrokenPtx) {
  bundle.write("kernels.ptx", ".version 8.0\n.target sm_90\n.address_size "
                              "64\n.visible .entry broken() { bogus; }\n");
  std::unique_ptr<Bundle> opened;
  Status status = Bundle::open(bundle.path, 0, opened);
  EXPECT_EQ(status.code(), MOE_ERROR_CUDA);
  EXPECT_NE(status.message().find("loading kernels.cubin: "), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("JIT-compiling kernels.ptx: "),
            std::string::npos)
      << status.message();
}

} // namespace
