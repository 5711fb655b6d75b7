"""The plain C++ reference of every op (lib/Reference, through the C API of
lib/Reference/ReferenceC.cpp in libmoe_reference.so) on torch tensors: what
the GPU tests check the bundles against, and the routing the grouped-matmul
tests, benchmark and tuner feed them."""

import ctypes
import os

import torch

# The storage types moe_reference_fused_moe rounds intermediates to.
_ROUNDING = {"f32": 0, "bf16": 1, "f16": 2}
# The C API's activation codes.
_ACTIVATIONS = {"silu": 1, "gelu": 2, "clamped_swiglu": 3}


def _activation(activation, swiglu):
    """(code, alpha, limit) of `activation` ("silu", "gelu" or
    "clamped_swiglu" with `swiglu` its (alpha, limit)) for the C API."""
    alpha, limit = swiglu if activation == "clamped_swiglu" else (0.0, 0.0)
    return _ACTIVATIONS[activation], alpha, limit


def _optional(tensor):
    """`tensor` as a float32 host tensor, or None."""
    return _host(tensor) if tensor is not None else None


def _address(tensor):
    return tensor.data_ptr() if tensor is not None else None


def _host(tensor, dtype=torch.float32):
    """`tensor` as a contiguous host tensor of `dtype`, which the C API
    reads through its address."""
    return tensor.cpu().to(dtype).contiguous()


class Reference:
    """The reference in libmoe_reference.so of build directory `build`.
    Takes tensors on any device and returns CPU tensors (float32, int32)."""

    def __init__(self, build):
        self.lib = ctypes.CDLL(os.path.join(build, "lib",
                                            "libmoe_reference.so"))
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
        activation = [ctypes.c_int, ctypes.c_float, ctypes.c_float]
        self.lib.moe_reference_fused_moe.argtypes = [
            ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int, ctypes.c_float, ctypes.c_int64, *activation,
            ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64] + [pointer] * 8

        self.lib.moe_reference_fused_experts.argtypes = [
            *activation, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int64] + [pointer] * 8

        count = ctypes.c_int64
        self.lib.moe_reference_to_e4m3.argtypes = [count, pointer, pointer]
        self.lib.moe_reference_from_e4m3.argtypes = [count, pointer, pointer]
        self.lib.moe_reference_fused_experts_fp8.argtypes = [
            ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64] + [pointer] * 9
        self.lib.moe_reference_calibrate_fp8.argtypes = [
            ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_int64] + [pointer] * 5

    def gate(self, router, logits, bias):
        tokens, experts = logits.shape
        slots = router["top_k"] + router["shared"]
        logits = _host(logits)
        bias = _host(bias) if bias is not None else None
        weights = torch.empty(tokens, slots)
        ids = torch.empty(tokens, slots, dtype=torch.int32)
        self.lib.moe_reference_gate(
            1 if router["scoring"] == "sigmoid" else 0, router["top_k"],
            router["groups"], router["topk_groups"], int(router["renormalize"]),
            router["scale"], router["shared"], tokens, experts,
            logits.data_ptr(),
            bias.data_ptr() if bias is not None else None,
            weights.data_ptr(), ids.data_ptr())
        return weights, ids

    def route(self, ids, num_experts, block_m):
        tokens, slots = ids.shape
        capacity = tokens * slots + num_experts * (block_m - 1)
        sorted_ids = torch.empty(capacity, dtype=torch.int32)
        expert_ids = torch.empty(-(-capacity // block_m), dtype=torch.int32)
        num_padded = torch.empty((), dtype=torch.int32)
        ids = _host(ids, torch.int32)
        self.lib.moe_reference_route(tokens, slots, ids.data_ptr(),
                                     num_experts, block_m,
                                     sorted_ids.data_ptr(),
                                     expert_ids.data_ptr(),
                                     num_padded.data_ptr())
        return sorted_ids, expert_ids, num_padded

    def combine(self, rows):
        tokens, slots, hidden = rows.shape
        rows = _host(rows)
        output = torch.empty(tokens, hidden)
        self.lib.moe_reference_combine(tokens, slots, hidden, rows.data_ptr(),
                                       None, output.data_ptr())
        return output

    def fused_moe(self, router, activation, dtype, hidden, logits, bias, w13,
                  w2, biases=(None, None), swiglu=None):
        """The layer with intermediates rounded to `dtype` (f32, bf16 or
        f16); `activation` silu, gelu or clamped_swiglu with `swiglu` its
        (alpha, limit); `biases` the expert biases (w13's [E+X, 2I], w2's
        [E+X, H]) or Nones."""
        tokens, hidden_size = hidden.shape
        experts = logits.shape[1]
        intermediate = w2.shape[2]
        args = [_host(tensor) for tensor in (hidden, logits, w13, w2)]
        bias = _optional(bias)
        w13_bias, w2_bias = (_optional(tensor) for tensor in biases)
        output = torch.empty(tokens, hidden_size)
        self.lib.moe_reference_fused_moe(
            1 if router["scoring"] == "sigmoid" else 0, router["top_k"],
            router["groups"], router["topk_groups"], int(router["renormalize"]),
            router["scale"], router["shared"],
            *_activation(activation, swiglu), _ROUNDING[dtype], tokens,
            hidden_size, experts, intermediate, args[0].data_ptr(),
            args[1].data_ptr(), _address(bias), args[2].data_ptr(),
            args[3].data_ptr(), _address(w13_bias), _address(w2_bias),
            output.data_ptr())
        return output

    def fused_experts(self, activation, dtype, hidden, ids, weights, w13, w2,
                      biases=(None, None), swiglu=None):
        """The experts given routing (moe.fused_experts): slots whose ids
        are outside [0, E) skipped, intermediates rounded to `dtype`;
        `activation`, `swiglu` and `biases` as for fused_moe."""
        tokens, hidden_size = hidden.shape
        experts, intermediate = w2.shape[0], w2.shape[2]
        slots = ids.shape[1]
        args = [_host(tensor) for tensor in (hidden, weights, w13, w2)]
        w13_bias, w2_bias = (_optional(tensor) for tensor in biases)
        ids = _host(ids, torch.int32)
        output = torch.empty(tokens, hidden_size)
        self.lib.moe_reference_fused_experts(
            *_activation(activation, swiglu), _ROUNDING[dtype], tokens,
            hidden_size, experts, intermediate, slots, args[0].data_ptr(),
            ids.data_ptr(), args[1].data_ptr(), args[2].data_ptr(),
            args[3].data_ptr(), _address(w13_bias), _address(w2_bias),
            output.data_ptr())
        return output

    # FP8 (include/moe/Reference/Quantization.h): e4m3 codes are uint8.
    _SCALING = {"tensor": 0, "channel": 1, "block": 2}

    def to_e4m3(self, values):
        """The e4m3 codes (uint8) of float `values`, rounded as Hopper's
        cvt.rn.satfinite does."""
        values = _host(values)
        codes = torch.empty(values.shape, dtype=torch.uint8)
        self.lib.moe_reference_to_e4m3(values.numel(), values.data_ptr(),
                                       codes.data_ptr())
        return codes

    def from_e4m3(self, codes):
        codes = _host(codes, torch.uint8)
        values = torch.empty(codes.shape)
        self.lib.moe_reference_from_e4m3(codes.numel(), codes.data_ptr(),
                                         values.data_ptr())
        return values

    def calibrate_fp8(self, scaling, block, activation, dtype, hidden, ids,
                      w13, w13_scales):
        """The static input scales (w13's, w2's: a float32 tensor of 2) that
        a calibration of the experts of fused_experts_fp8 on `hidden` and
        `ids` finds: each GEMM input's amax / 448 over the tokens."""
        tokens, hidden_size = hidden.shape
        hidden, w13_scales = _host(hidden), _host(w13_scales)
        w13, ids = _host(w13, torch.uint8), _host(ids, torch.int32)
        scales = torch.empty(2)
        self.lib.moe_reference_calibrate_fp8(
            self._SCALING[scaling], block, 2 if activation == "gelu" else 1,
            _ROUNDING[dtype], tokens, hidden_size, w13.shape[0],
            w13.shape[1] // 2, ids.shape[1], hidden.data_ptr(), ids.data_ptr(), w13.data_ptr(),
            w13_scales.data_ptr(), scales.data_ptr())
        return scales

    def fused_experts_fp8(self, scaling, block, activation, dtype, hidden, ids,
                          weights, w13, w13_scales, w2, w2_scales,
                          input_scales=None):
        """moe.fused_experts with e4m3 weight codes (uint8) and their fp32
        scales under #moe.quantization `scaling` (tensor, channel, block of
        `block`), intermediates rounded to `dtype`; the activations
        quantized dynamically, or with `input_scales` (the w13 and w2
        inputs' static scales, activations = static_tensor: two floats or
        one-element tensors) by those."""
        tokens, hidden_size = hidden.shape
        experts, intermediate = w2.shape[0], w2.shape[2]
        slots = ids.shape[1]
        floats = [_host(t) for t in (hidden, weights, w13_scales, w2_scales)]
        codes = [_host(t, torch.uint8) for t in (w13, w2)]
        ids = _host(ids, torch.int32)
        statics = (torch.tensor([float(scale) for scale in input_scales])
                   if input_scales is not None else None)
        output = torch.empty(tokens, hidden_size)
        self.lib.moe_reference_fused_experts_fp8(
            self._SCALING[scaling], block, 2 if activation == "gelu" else 1,
            _ROUNDING[dtype], tokens, hidden_size, experts, intermediate,
            slots, floats[0].data_ptr(), ids.data_ptr(), floats[1].data_ptr(),
            codes[0].data_ptr(), floats[2].data_ptr(), codes[1].data_ptr(),
            floats[3].data_ptr(),
            statics.data_ptr() if statics is not None else None,
            output.data_ptr())
        return output
