//===- RuntimeModule.cpp - moe_mlir._runtime ------------------------------===//
//
// The runtime half of the moe_mlir package: a bundle loaded onto one CUDA
// device and launched on a caller's stream with raw device pointers, over
// the runtime's C++ API, plus a reader of DLPack capsules. It links no MLIR,
// so the GPU machine builds it too. The torch and DLPack conveniences live
// in moe_mlir/runtime.py.
//
//===----------------------------------------------------------------------===//

#include "PythonError.h"

#include "moe/Runtime/Runtime.h"

#include <pybind11/stl.h>

#include <cstring>
#include <limits>

namespace py = pybind11;
using moe_python::Error;

namespace {

/// The runtime's element type names, indexed by MoeDtype.
constexpr const char *kDtypeNames[] = {"f32", "bf16", "f16",   "i32",
                                       "i64", "u8",   "f8e4m3"};

int32_t parseDtype(const std::string &name) {
  for (int32_t code = 0; code < static_cast<int32_t>(std::size(kDtypeNames));
       ++code)
    if (name == kDtypeNames[code])
      return code;
  throw py::value_error("unknown element type '" + name +
                        "' (f32, bf16, f16, i32, i64, u8)");
}

/// Caller tensor `index` as Python describes it, a (device pointer, element
/// type name, dims) tuple.
MoeTensor describeTensor(py::handle description, size_t index) {
  std::string what = "tensor #" + std::to_string(index);
  if (!py::isinstance<py::tuple>(description) || py::len(description) != 3)
    throw py::type_error(what + " must be a (pointer, dtype, shape) tuple");
  auto fields = py::reinterpret_borrow<py::tuple>(description);
  if (!py::isinstance<py::str>(fields[1]) ||
      !py::isinstance<py::sequence>(fields[2]))
    throw py::type_error(what + " must be a (pointer, dtype, shape) tuple "
                                "with a str dtype and a sequence shape");
  auto dims = py::reinterpret_borrow<py::sequence>(fields[2]);
  if (dims.size() > MOE_MAX_RANK)
    throw py::value_error(what + " has rank " + std::to_string(dims.size()) +
                          "; bundles take at most " +
                          std::to_string(MOE_MAX_RANK));
  MoeTensor tensor{};
  int64_t pointer = moe_python::int64Argument(fields[0], what + "'s pointer");
  if (pointer < 0)
    throw py::value_error(what + "'s pointer is negative");
  tensor.data = reinterpret_cast<void *>(static_cast<uintptr_t>(pointer));
  tensor.dtype = parseDtype(fields[1].cast<std::string>());
  tensor.rank = static_cast<int32_t>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d)
    tensor.dims[d] = moe_python::int64Argument(dims[d], what + "'s dim " +
                                                            std::to_string(d));
  return tensor;
}

/// A bundle loaded onto one device (moe::runtime::Bundle).
class Bundle {
public:
  Bundle(const std::string &path, py::handle deviceArg) {
    int64_t device = moe_python::int64Argument(deviceArg, "device");
    if (device < 0 || device > std::numeric_limits<int>::max())
      throw py::value_error("device " + std::to_string(device) +
                            " is no CUDA device ordinal");
    moe::runtime::Status status =
        moe::runtime::Bundle::open(path, static_cast<int>(device), bundle);
    if (!status.ok())
      throw Error("cannot open bundle " + path + ": " + status.message());
  }

  /// Frees the workspaces and the module; the caller must have synchronised
  /// the streams that ran the bundle.
  void close() { bundle.reset(); }
  bool closed() const { return !bundle; }

  int64_t tokensMax() const { return get().tokensMax(); }
  int numTensors() const { return get().numTensors(); }

  /// The bound of each variant, in order: the largest T it serves.
  std::vector<int64_t> variants() const {
    std::vector<int64_t> bounds(get().numVariants());
    for (size_t index = 0; index < bounds.size(); ++index)
      bounds[index] = get().variantMaxTokens(static_cast<int>(index));
    return bounds;
  }

  /// The index of the variant a run with `tokens` tokens executes.
  int variantFor(py::handle tokens) const {
    int index = 0;
    moe::runtime::Status status = get().variantForTokens(
        moe_python::int64Argument(tokens, "tokens"), index);
    if (!status.ok())
      throw Error(status.message());
    return index;
  }

  /// (name, role, dtype, shape) of each caller tensor at `tokens` tokens.
  py::list tensors(py::handle tokensArg) const {
    int64_t tokens = moe_python::int64Argument(tokensArg, "tokens");
    py::list list;
    for (int index = 0; index < get().numTensors(); ++index) {
      MoeTensorInfo info;
      moe::runtime::Status status = get().tensorInfo(index, tokens, info);
      if (!status.ok())
        throw Error(status.message());
      py::tuple shape(info.rank);
      for (int d = 0; d < info.rank; ++d)
        shape[d] = info.dims[d];
      list.append(py::make_tuple(
          info.name, info.role == MOE_ROLE_INPUT ? "input" : "output",
          kDtypeNames[info.dtype], shape));
    }
    return list;
  }

  /// {name: (world, rank)} of the exchange buffers among the caller
  /// tensors: the ranks of their slices and the rank whose slice a run
  /// passes.
  py::dict exchanges() const {
    py::dict exchanges;
    for (int index = 0; index < get().numTensors(); ++index) {
      MoeTensorInfo info;
      moe::runtime::Status status =
          get().tensorInfo(index, get().tokensMax(), info);
      if (!status.ok())
        throw Error(status.message());
      if (info.world)
        exchanges[py::str(info.name)] =
            py::make_tuple(info.world, info.rank_of_slice);
    }
    return exchanges;
  }

  /// Binds the device addresses `slices` (rank d's at index d) of exchange
  /// buffer `index`; blocking.
  void bindPeers(py::handle index, py::sequence slices) {
    std::vector<const void *> pointers;
    for (size_t d = 0; d < slices.size(); ++d) {
      int64_t pointer = moe_python::int64Argument(
          slices[d], "the slice of rank " + std::to_string(d));
      if (pointer < 0)
        throw py::value_error("the slice of rank " + std::to_string(d) +
                              " is a negative pointer");
      pointers.push_back(
          reinterpret_cast<const void *>(static_cast<uintptr_t>(pointer)));
    }
    int64_t tensor = moe_python::int64Argument(index, "tensor index");
    if (tensor < 0 || tensor > std::numeric_limits<int>::max())
      throw py::value_error("tensor index " + std::to_string(tensor) +
                            " is out of range");
    moe::runtime::Status status =
        get().bindPeers(static_cast<int>(tensor), pointers.data(),
                        static_cast<int>(pointers.size()));
    if (!status.ok())
      throw Error(status.message());
  }

  /// Enqueues the plan for `tokens` tokens on `stream` (a CUstream; 0 is
  /// the legacy default stream). Never synchronises.
  void run(py::handle tokens, py::sequence tensors, uintptr_t stream) {
    std::vector<MoeTensor> described;
    for (size_t i = 0; i < tensors.size(); ++i)
      described.push_back(describeTensor(tensors[i], i));
    moe::runtime::Status status = get().run(
        moe_python::int64Argument(tokens, "tokens"), described.data(),
        static_cast<int>(described.size()), reinterpret_cast<CUstream>(stream));
    if (!status.ok())
      throw Error(status.message());
  }

private:
  moe::runtime::Bundle &get() const {
    if (!bundle)
      throw Error("the bundle is closed");
    return *bundle;
  }

  std::unique_ptr<moe::runtime::Bundle> bundle;
};

//===----------------------------------------------------------------------===//
// DLPack (the ABI of dlpack.h, version 0.x capsules "dltensor")
//===----------------------------------------------------------------------===//

struct DLDevice {
  int32_t deviceType;
  int32_t deviceId;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; // In elements; null for a compact row-major tensor.
  uint64_t byteOffset;
};
struct DLManagedTensor {
  DLTensor tensor;
  void *managerContext;
  void (*deleter)(DLManagedTensor *);
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLFloat8E4M3FN = 10
};

/// The runtime's name of a DLPack element type.
std::string dlpackDtype(DLDataType dtype) {
  if (dtype.lanes == 1) {
    if (dtype.code == kDLFloat && dtype.bits == 32)
      return "f32";
    if (dtype.code == kDLBfloat && dtype.bits == 16)
      return "bf16";
    if (dtype.code == kDLFloat && dtype.bits == 16)
      return "f16";
    if (dtype.code == kDLInt && dtype.bits == 32)
      return "i32";
    if (dtype.code == kDLInt && dtype.bits == 64)
      return "i64";
    if (dtype.code == kDLUInt && dtype.bits == 8)
      return "u8";
    if (dtype.code == kDLFloat8E4M3FN && dtype.bits == 8)
      return "f8e4m3";
  }
  throw py::type_error(
      "DLPack element type (code " + std::to_string(dtype.code) + ", " +
      std::to_string(dtype.bits) + " bits, " + std::to_string(dtype.lanes) +
      " lanes) is none of f32, bf16, f16, i32, i64, u8, f8e4m3");
}

/// What a DLPack capsule describes: (pointer, dtype, shape, device type,
/// device id, contiguous). The capsule is read, not consumed: the producer's
/// array keeps owning the memory, so the caller keeps it alive.
py::tuple readDlpack(py::capsule capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw py::type_error("expected an unconsumed DLPack capsule (named "
                         "'dltensor'), as __dlpack__() returns");
  auto *managed = static_cast<DLManagedTensor *>(
      PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  const DLTensor &tensor = managed->tensor;
  py::tuple shape(tensor.ndim);
  bool contiguous = true;
  int64_t stride = 1;
  for (int32_t d = tensor.ndim - 1; d >= 0; --d) {
    shape[d] = tensor.shape[d];
    // A dim of size 1 may have any stride.
    if (tensor.strides && tensor.shape[d] != 1 && tensor.strides[d] != stride)
      contiguous = false;
    stride *= tensor.shape[d];
  }
  uintptr_t pointer =
      reinterpret_cast<uintptr_t>(tensor.data) + tensor.byteOffset;
  return py::make_tuple(pointer, dlpackDtype(tensor.dtype), shape,
                        tensor.device.deviceType, tensor.device.deviceId,
                        contiguous);
}

} // namespace

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "The moe runtime: bundles on CUDA devices (see moe_mlir.Bundle "
            "for the documented API).";
  moe_python::registerErrorTranslator();

  py::class_<Bundle>(m, "Bundle")
      .def(py::init<const std::string &, py::handle>(), py::arg("path"),
           py::arg("device"))
      .def("close", &Bundle::close)
      .def_property_readonly("closed", &Bundle::closed)
      .def_property_readonly("tokens_max", &Bundle::tokensMax)
      .def_property_readonly("num_tensors", &Bundle::numTensors)
      .def_property_readonly("variants", &Bundle::variants)
      .def("variant_for", &Bundle::variantFor, py::arg("tokens"))
      .def("tensors", &Bundle::tensors, py::arg("tokens"))
      .def("exchanges", &Bundle::exchanges)
      .def("bind_peers", &Bundle::bindPeers, py::arg("index"),
           py::arg("slices"))
      .def("run", &Bundle::run, py::arg("tokens"), py::arg("tensors"),
           py::arg("stream"));
  m.def("read_dlpack", &readDlpack, py::arg("capsule"));
}
