"""ctypes access to the reference (libmoe_reference.so) for the GPU tests
and benchmarks, on torch tensors; they run bundles through moe_mlir.Bundle."""

import ctypes
import json
import os

import torch

DTYPES = {"f32": (0, torch.float32), "bf16": (1, torch.bfloat16),
          "f16": (2, torch.float16), "i32": (3, torch.int32)}


def _library(build, name):
    return ctypes.CDLL(os.path.join(build, "lib", name))


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
