"""ctypes access to the runtime (libmoe_runtime.so) and to the reference
(libmoe_reference.so) for the GPU tests and benchmarks, on torch tensors."""

import ctypes
import json
import os

import torch

MAX_RANK = 4
DTYPES = {"f32": (0, torch.float32), "bf16": (1, torch.bfloat16),
          "f16": (2, torch.float16), "i32": (3, torch.int32)}
TORCH_DTYPES = {code: dtype for code, dtype in DTYPES.values()}
CODES = {dtype: code for code, dtype in DTYPES.values()}


class MoeTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * MAX_RANK)]


class MoeTensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("role", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * MAX_RANK)]


def _library(build, name):
    return ctypes.CDLL(os.path.join(build, "lib", name))


class Bundle:
    """A bundle loaded on the current CUDA device."""

    def __init__(self, build, path):
        self.lib = _library(build, "libmoe_runtime.so")
        self.lib.moe_bundle_open.argtypes = [
            ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_char_p, ctypes.c_size_t]
        self.lib.moe_bundle_run.argtypes = [
            ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(MoeTensor),
            ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.moe_bundle_tensor_info.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_int64,
            ctypes.POINTER(MoeTensorInfo), ctypes.c_char_p, ctypes.c_size_t]
        self.lib.moe_bundle_num_tensors.argtypes = [ctypes.c_void_p]
        self.lib.moe_bundle_close.argtypes = [ctypes.c_void_p]
        self.handle = ctypes.c_void_p()
        self.error = ctypes.create_string_buffer(4096)
        status = self.lib.moe_bundle_open(
            path.encode(), torch.cuda.current_device(),
            ctypes.byref(self.handle), self.error, len(self.error))
        if status:
            raise RuntimeError(f"moe_bundle_open({path}): "
                               f"{self.error.value.decode()}")
        self.count = self.lib.moe_bundle_num_tensors(self.handle)

    def infos(self, tokens):
        """(name, role, torch dtype, shape) of each tensor at `tokens`."""
        result = []
        for index in range(self.count):
            info = MoeTensorInfo()
            if self.lib.moe_bundle_tensor_info(self.handle, index, tokens,
                                               ctypes.byref(info), self.error,
                                               len(self.error)):
                raise RuntimeError(self.error.value.decode())
            result.append((info.name.decode(), info.role,
                           TORCH_DTYPES[info.dtype],
                           tuple(info.dims[:info.rank])))
        return result

    def describe(self, tensors):
        array = (MoeTensor * len(tensors))()
        for slot, tensor in zip(array, tensors):
            slot.data = tensor.data_ptr()
            slot.dtype = CODES[tensor.dtype]
            slot.rank = tensor.dim()
            for axis, size in enumerate(tensor.shape):
                slot.dims[axis] = size
        return array

    def run(self, tokens, tensors, described=None):
        """Enqueues a run on the current stream; raises on an error."""
        array = described if described is not None else self.describe(tensors)
        stream = torch.cuda.current_stream().cuda_stream
        status = self.lib.moe_bundle_run(self.handle, tokens, array,
                                         len(tensors), stream, self.error,
                                         len(self.error))
        if status:
            raise RuntimeError(f"moe_bundle_run: {self.error.value.decode()}")

    def close(self):
        self.lib.moe_bundle_close(self.handle)


class Reference:
    """The plain C++ reference of lib/Reference, on CPU float tensors."""

    def __init__(self, build):
        self.lib = _library(build, "libmoe_reference.so")
        pointer = ctypes.c_void_p
        self.lib.moe_reference_gate.argtypes = [
            ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int, ctypes.c_float, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64, pointer, pointer, pointer, pointer]
        self.lib.moe_reference_route.argtypes = [
            ctypes.c_int64, ctypes.c_int64, pointer, ctypes.c_int64,
            ctypes.c_int64, pointer, pointer, pointer]
        self.lib.moe_reference_combine.argtypes = [
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, pointer, pointer,
            pointer]
        self.lib.moe_reference_fused_moe.argtypes = [
            ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int, ctypes.c_float, ctypes.c_int64, ctypes.c_int,
            ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64, pointer, pointer, pointer, pointer, pointer,
            pointer]

    def gate(self, router, logits, bias):
        tokens, experts = logits.shape
        slots = router["top_k"] + router["shared"]
        logits = logits.float().contiguous()
        weights = torch.empty(tokens, slots)
        ids = torch.empty(tokens, slots, dtype=torch.int32)
        self.lib.moe_reference_gate(
            1 if router["scoring"] == "sigmoid" else 0, router["top_k"],
            router["groups"], router["topk_groups"], int(router["renormalize"]),
            router["scale"], router["shared"], tokens, experts,
            logits.data_ptr(),
            bias.float().contiguous().data_ptr() if bias is not None else None,
            weights.data_ptr(), ids.data_ptr())
        return weights, ids

    def route(self, ids, num_experts, block_m):
        tokens, slots = ids.shape
        capacity = tokens * slots + num_experts * (block_m - 1)
        sorted_ids = torch.empty(capacity, dtype=torch.int32)
        expert_ids = torch.empty(-(-capacity // block_m), dtype=torch.int32)
        num_padded = torch.empty((), dtype=torch.int32)
        ids = ids.contiguous()
        self.lib.moe_reference_route(tokens, slots, ids.data_ptr(),
                                     num_experts, block_m,
                                     sorted_ids.data_ptr(),
                                     expert_ids.data_ptr(),
                                     num_padded.data_ptr())
        return sorted_ids, expert_ids, num_padded

    def combine(self, rows):
        tokens, slots, hidden = rows.shape
        rows = rows.float().contiguous()
        output = torch.empty(tokens, hidden)
        self.lib.moe_reference_combine(tokens, slots, hidden, rows.data_ptr(),
                                       None, output.data_ptr())
        return output


    def fused_moe(self, router, activation, dtype, hidden, logits, bias, w13,
                  w2):
        """The layer with intermediates rounded to `dtype` (a DTYPES key)."""
        tokens, hidden_size = hidden.shape
        experts = logits.shape[1]
        intermediate = w2.shape[2]
        args = [tensor.float().contiguous() for tensor in (hidden, logits, w13, w2)]
        bias = bias.float().contiguous() if bias is not None else None
        output = torch.empty(tokens, hidden_size)
        self.lib.moe_reference_fused_moe(
            1 if router["scoring"] == "sigmoid" else 0, router["top_k"],
            router["groups"], router["topk_groups"], int(router["renormalize"]),
            router["scale"], router["shared"],
            2 if activation == "gelu" else 1, DTYPES[dtype][0], tokens,
            hidden_size, experts, intermediate, args[0].data_ptr(),
            args[1].data_ptr(), bias.data_ptr() if bias is not None else None,
            args[2].data_ptr(), args[3].data_ptr(), output.data_ptr())
        return output


def load_specs(bundles):
    with open(os.path.join(bundles, "bundles.json")) as file:
        return json.load(file)["bundles"]
