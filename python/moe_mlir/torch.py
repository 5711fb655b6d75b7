"""torch glue: FusedMoE and FusedExperts, nn.Modules that run a MoE layer's
bundle (the whole layer, or its experts routed by the caller) on CUDA
tensors, with weights in the activations' dtype, in fp8 (e4m3) or MXFP4
with their scales (fp8 ones with static activation scales too), and
gpt-oss's expert biases, on one GPU, tensor-parallel over the ranks of
a torch.distributed group or (FusedMoE) expert-parallel over them; the
torch.library ops they call, ``moe_mlir::fused_moe``,
``moe_mlir::fused_moe_ep`` and ``moe_mlir::fused_experts``;
quantize_fp8_weights and fuse_gate_up for making and loading fp8 weights,
quantize_mxfp4_weights, gpt_oss_weights and gpt_oss_mxfp4_weights for
MXFP4 and gpt-oss's checkpoints; and empty_outputs for running any bundle
on torch tensors.

The modules check their arguments in Python and then call the ops, which
torch.compile, torch.export and FX see as single opaque nodes (their fake
implementations give the output's shape, dtype and device) and which CUDA
graphs capture. An op loads its bundle onto a device at its first call
there and keeps it for the process (unload_bundles frees them).

Importing this module imports torch; the rest of moe_mlir does not.
"""

import dataclasses
import json
import math
import os
import threading
from typing import Optional

import torch
import torch.distributed

from . import layers
from ._errors import Error
from .expert_parallel import RankBundles, SymmetricExchange
from .runtime import Bundle

__all__ = ["FusedExperts", "FusedMoE", "TORCH_DTYPES", "empty_outputs",
           "fuse_gate_up", "fused_experts", "fused_moe", "fused_moe_ep",
           "gpt_oss_weights",
           "gpt_oss_mxfp4_weights", "quantize_fp8_weights",
           "quantize_mxfp4_weights", "unload_bundles"]

#: torch's dtype of each bundle element type.
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16,
                "f16": torch.float16, "i32": torch.int32,
                "i64": torch.int64, "u8": torch.uint8,
                "f8e4m3": torch.float8_e4m3fn}
_BUNDLE_DTYPES = {dtype: name for name, dtype in TORCH_DTYPES.items()}
_LAYER_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16",
                 torch.float32: "f32"}
_FP8 = torch.float8_e4m3fn
# The largest finite e4m3 value: a scale maps a block's amax to it.
_E4M3_MAX = 448.0
# MXFP4 weights: two e2m1 codes a byte (the even K index in the low nibble),
# an e8m0 exponent per MX_BLOCK values of K. The bundle reads both as u8.
_MXFP4 = torch.float4_e2m1fn_x2
_E8M0 = torch.float8_e8m0fnu
# The midpoints between neighbouring e2m1 magnitudes (0, 0.5, 1, 1.5, 2, 3,
# 4, 6): a magnitude rounds to the code of the number of midpoints below
# it, ties to the even code.
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
# The fp8 scales' parameter names, as the checkpoints and vLLM name them:
# block scales `weight_scale_inv` (DeepSeek-V3's name; multipliers all the
# same, value = e4m3 * scale), per-tensor and per-channel ones
# `weight_scale`.
_SCALE_NAMES = {"block": ("w13_weight_scale_inv", "w2_weight_scale_inv"),
                "channel": ("w13_weight_scale", "w2_weight_scale"),
                "tensor": ("w13_weight_scale", "w2_weight_scale"),
                layers.MXFP4: ("w13_weight_scale", "w2_weight_scale")}
# The static activation scales' parameter names, vLLM's (and the
# checkpoints' input_scale): of w13's input, the hidden states, and of w2's,
# the activation's output.
_INPUT_SCALE_NAMES = ("w13_input_scale", "w2_input_scale")
# The expert ids FusedExperts takes: torch's integer types with full
# support on CUDA (the unsigned 16- to 64-bit ones lack comparisons there).
_ID_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_ID_DTYPE_NAMES = ", ".join(str(dtype) for dtype in _ID_DTYPES)
# The runtime's alignment of every tensor's address.
_ALIGNMENT = 16


def empty_outputs(bundle, tokens):
    """Uninitialised torch tensors for the outputs of ``bundle`` (a
    moe_mlir.Bundle) at ``tokens`` tokens, on its device, in order."""
    return [torch.empty(info.shape, dtype=TORCH_DTYPES[info.dtype],
                        device=f"cuda:{bundle.device}")
            for info in bundle.tensors(tokens) if info.role == "output"]


# The ops' bundles, loaded at the first call on each device:
# {(bundle path, device index): Bundle}.
_LOADED_BUNDLES = {}
# fused_moe_ep's rank layers, made at the first call at each token count on
# each device: {(ep_layer, group name, T, device index): (RankBundles,
# SymmetricExchange)}.
_EXPERT_PARALLEL = {}
_LOADING = threading.Lock()


def unload_bundles():
    """Frees the device memory of every bundle the ops loaded (after
    waiting for the devices to finish their work), and the exchange buffers
    of expert-parallel layers; the next call of an op loads its bundle
    again (and allocates new exchange buffers, collectively). CUDA graphs
    captured with them must not be replayed afterwards. With
    expert-parallel modules, every rank of their groups calls it at the
    same point between forwards: a peer's next forward stores into this
    rank's exchange buffers."""
    with _LOADING:
        bundles = list(_LOADED_BUNDLES.values())
        _LOADED_BUNDLES.clear()
        ranks = list(_EXPERT_PARALLEL.values())
        _EXPERT_PARALLEL.clear()
    for bundle in bundles:
        torch.cuda.synchronize(bundle.device)
        bundle.close()
    for rank_bundles, _ in ranks:
        torch.cuda.synchronize(rank_bundles.bundles["combine"].device)
        rank_bundles.close()


def _loaded_bundle(path, tokens, tensors):
    """The bundle at ``path`` on the device of ``tensors`` (the caller
    tensors of a run at ``tokens`` tokens), loaded at the first call there
    and checked to take such tensors."""
    index = tensors[0].device.index
    bundle = _LOADED_BUNDLES.get((path, index))
    if bundle is not None:
        return bundle
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"the bundle {path} is loaded onto cuda:{index} at the first "
            "forward there (of FusedMoE, FusedExperts or their ops), which "
            "allocates device memory and so cannot happen during CUDA-graph "
            "capture: run forward once before capturing")
    with _LOADING:
        bundle = _LOADED_BUNDLES.get((path, index))
        if bundle is None:
            bundle = Bundle(path, index)
            try:
                _check_takes(bundle, tokens, tensors)
            except Error:
                bundle.close()
                raise
            _LOADED_BUNDLES[(path, index)] = bundle
    return bundle


def _check_takes(bundle, tokens, tensors):
    """Raises Error unless ``bundle`` takes ``tensors`` (inputs, then one
    output) at ``tokens`` tokens: guards against a cache entry from another
    compiler or a damaged one, which would otherwise fail at each run."""
    expected = [(info.role, info.dtype, tuple(info.shape))
                for info in bundle.tensors(tokens)]
    roles = ["input"] * (len(tensors) - 1) + ["output"]
    actual = [(role, _BUNDLE_DTYPES.get(tensor.dtype, str(tensor.dtype)),
               tuple(tensor.shape)) for role, tensor in zip(roles, tensors)]
    if actual != expected:
        raise Error(f"bundle {bundle.path} does not take these tensors (it "
                    f"takes {expected}, given {actual}); if it came from a "
                    "cache, delete it to have it compiled again")


def _run_bundle(path, activations, weights, tp_group_name=None):
    """The output [T, H] of the bundle at ``path``, enqueued on torch's
    current stream of the activations' device without synchronising; with
    ``tp_group_name`` (the group_name of a torch.distributed process group)
    summed over the group's ranks in place by torch.distributed.all_reduce,
    which NCCL enqueues without a host synchronisation too (and CUDA graphs
    capture).

    ``activations`` (hidden states [T, H] first) may be strided or
    misaligned views: they are copied where the runtime needs it.
    ``weights`` ((name, tensor) pairs) must be contiguous and aligned
    already, since a copy of them at every call would cost more than the
    layer."""
    hidden_states = activations[0]
    tokens = hidden_states.shape[0]
    output = hidden_states.new_empty(hidden_states.shape)
    if tokens == 0:
        return output
    _check_in_place(weights)
    # The runtime reads packed MXFP4 codes and e8m0 scales as bytes.
    tensors = ([_aligned(tensor.contiguous()) for tensor in activations]
               + [weight.view(torch.uint8) if weight.dtype in (_MXFP4, _E8M0)
                  else weight for _, weight in weights] + [output])
    bundle = _loaded_bundle(path, tokens, tensors)
    device = hidden_states.device
    bundle.run(tokens, tensors, torch.cuda.current_stream(device).cuda_stream)
    if tp_group_name is not None:
        # Each rank computed its shard's part of every expert: their sum is
        # the layer. The op takes the group by name, which is what a
        # torch.library op can take (and what c10d's functional collectives
        # pass too).
        torch.distributed.all_reduce(
            output, group=torch.distributed.distributed_c10d
            ._resolve_process_group(tp_group_name))
    return output


def _readable_in_place(tensor):
    """Whether the runtime reads `tensor` as it is: contiguous and
    _ALIGNMENT-byte aligned."""
    return tensor.is_contiguous() and tensor.data_ptr() % _ALIGNMENT == 0


def _check_in_place(weights):
    """Raises ValueError unless the runtime reads each of ``weights``
    ((name, tensor) pairs) in place (_readable_in_place)."""
    for name, weight in weights:
        if not _readable_in_place(weight):
            raise ValueError(f"{name} must be contiguous and {_ALIGNMENT}-"
                             "byte aligned")


def _aligned(tensor):
    """`tensor`, copied if its address is not as aligned as the runtime
    needs (a view into the middle of a larger tensor can start anywhere)."""
    return tensor.clone() if tensor.data_ptr() % _ALIGNMENT else tensor


def _pair(names, w13_tensor, w2_tensor, what):
    """The bundle's (name, tensor) pairs of an optional pair of inputs
    ``names`` (scales of quantized weights, expert biases): both or
    neither."""
    if (w13_tensor is None) != (w2_tensor is None):
        raise ValueError(f"give both {names[0]} and {names[1]} ({what}) or "
                         "neither")
    if w13_tensor is None:
        return []
    return list(zip(names, (w13_tensor, w2_tensor)))


def _biases_and_scales(w13_bias, w2_bias, w13_scales, w2_scales,
                       w13_input_scale, w2_input_scale):
    """The bundle's last inputs: the expert biases, the weights' scales,
    then the static activation scales."""
    return (_pair(("w13_bias", "w2_bias"), w13_bias, w2_bias,
                  "expert biases")
            + _pair(("w13_scales", "w2_scales"), w13_scales, w2_scales,
                    "quantized weights")
            + _pair(("w13_input_scale", "w2_input_scale"), w13_input_scale,
                    w2_input_scale, "static activation scales"))


def _fused_moe(hidden_states: torch.Tensor, router_logits: torch.Tensor,
              w13: torch.Tensor, w2: torch.Tensor,
              correction_bias: Optional[torch.Tensor], bundle_path: str,
              w13_scales: Optional[torch.Tensor] = None,
              w2_scales: Optional[torch.Tensor] = None,
              tp_group_name: Optional[str] = None,
              w13_bias: Optional[torch.Tensor] = None,
              w2_bias: Optional[torch.Tensor] = None,
              w13_input_scale: Optional[torch.Tensor] = None,
              w2_input_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One MoE layer (moe.fused_moe) by its bundle at ``bundle_path``
    (moe_mlir.layer_bundle, part "layer"): the output [T, H]; with
    ``tp_group_name`` the bundle is a tensor-parallel rank's
    (Layer.tensor_parallel) and the output the sum over the ranks of that
    torch.distributed group (all_reduce), which every rank must call alike.

    The tensors are those of the bundle, on one CUDA device:
    ``hidden_states`` [T, H] in the layer's activation dtype, the weights
    in it too or, for a bundle of fp8 weights, float8_e4m3fn with their
    float32 ``w13_scales`` and ``w2_scales`` (the bundle's last inputs),
    for MXFP4 ones float4_e2m1fn_x2 (or uint8) with float8_e8m0fnu (or
    uint8) scales; ``router_logits`` [T, E] and ``correction_bias`` [E]
    (None when the layer has none) in float32; the expert biases
    ``w13_bias`` [E+X, 2I] and ``w2_bias`` [E+X, H] in the activation
    dtype for a layer with them, else None; for a bundle of fp8 weights
    with static activation scales (quantization "tensor-static" or
    "channel-static") ``w13_input_scale`` and ``w2_input_scale``, float32
    [1] each (the scale of w13's input, the hidden states, and of w2's, the
    activation's output), else None. FusedMoE.forward checks them and
    converts the logits; called directly, the runtime's checks raise
    moe_mlir.Error.
    """
    weights = [("w13", w13), ("w2", w2)]
    if correction_bias is not None:
        weights.append(("correction_bias", correction_bias))
    weights += _biases_and_scales(w13_bias, w2_bias, w13_scales, w2_scales,
                                  w13_input_scale, w2_input_scale)
    return _run_bundle(bundle_path, [hidden_states, router_logits], weights,
                       tp_group_name)


def _fused_experts(hidden_states: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor, w13: torch.Tensor,
                  w2: torch.Tensor, bundle_path: str,
                  w13_scales: Optional[torch.Tensor] = None,
                  w2_scales: Optional[torch.Tensor] = None,
                  tp_group_name: Optional[str] = None,
                  w13_bias: Optional[torch.Tensor] = None,
                  w2_bias: Optional[torch.Tensor] = None,
                  w13_input_scale: Optional[torch.Tensor] = None,
                  w2_input_scale: Optional[torch.Tensor] = None
                  ) -> torch.Tensor:
    """A MoE layer's experts routed by the caller (moe.fused_experts) by
    their bundle at ``bundle_path`` (moe_mlir.layer_bundle, part
    "experts"): the output [T, H], summed over the ranks of the
    tensor-parallel group ``tp_group_name`` as for fused_moe.

    out[t] = sum over the slots s whose id e = topk_ids[t, s] is in
    [0, E+X) of topk_weights[t, s] * (silu(x w13[e, :I]^T) *
    (x w13[e, I:]^T)) w2[e]^T (with expert biases and gpt-oss's clamped
    SwiGLU where the layer has them); ids outside that range (vLLM's -1
    for an expert of another rank) add nothing, and an expert named in two
    slots of a token counts twice. ``hidden_states`` [T, H] and the weights
    in the layer's activation dtype, or quantized weights with their
    scales, the expert biases and static activation scales, as for
    fused_moe; ``topk_ids`` [T, S]
    int32, ``topk_weights`` [T, S] float32, on one CUDA device.
    FusedExperts.forward checks them and converts ids and weights of other
    types.
    """
    return _run_bundle(bundle_path, [hidden_states, topk_ids, topk_weights],
                       [("w13", w13), ("w2", w2)]
                       + _biases_and_scales(w13_bias, w2_bias, w13_scales,
                                            w2_scales, w13_input_scale,
                                            w2_input_scale), tp_group_name)


def _ep_layer(layer, dtype, world, rank, bundle_options):
    """fused_moe_ep's ``ep_layer``: rank ``rank`` of ``world`` of the bf16,
    f16 or f32 (``dtype``) ``layer`` and layer_bundle's ``bundle_options``
    (cache_dir, device_name, ...), what makes its bundles at any token
    count, as JSON text (an op takes strings, not objects)."""
    return json.dumps({"layer": dataclasses.asdict(layer), "dtype": dtype,
                       "world": world, "rank": rank,
                       "bundle_options": bundle_options}, sort_keys=True)


def _expert_parallel_rank(ep_layer, group_name, tokens, device):
    """(RankBundles, SymmetricExchange) of the rank ``ep_layer`` describes
    at ``tokens`` tokens on ``device`` (a torch.device, current), made at
    the first call: its three bundles compiled (or found in the cache) and
    loaded, the exchange buffers allocated in symmetric memory over the
    process group named ``group_name`` and bound, which is collective and
    blocking."""
    key = (ep_layer, group_name, tokens, device.index)
    rank_layer = _EXPERT_PARALLEL.get(key)
    if rank_layer is not None:
        return rank_layer
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"an expert-parallel FusedMoE makes its bundles and exchange "
            f"buffers at its first forward at {tokens} tokens on "
            f"cuda:{device.index}, which allocates device memory and so "
            "cannot happen during CUDA-graph capture: run forward once at "
            "that token count before capturing")
    spec = json.loads(ep_layer)
    fields = spec["layer"]
    layer = layers.Layer(**dict(fields,
                                router=layers.Router(**fields["router"])))
    group = torch.distributed.distributed_c10d._resolve_process_group(
        group_name)
    place = (torch.distributed.get_world_size(group),
             torch.distributed.get_rank(group))
    if place != (spec["world"], spec["rank"]):
        raise Error(f"the layer is rank {spec['rank']} of {spec['world']}, "
                    f"but this process is rank {place[1]} of {place[0]} in "
                    f"process group {group_name!r}")
    with _LOADING:
        rank_layer = _EXPERT_PARALLEL.get(key)
        if rank_layer is None:
            bundles = RankBundles(layer, spec["world"], spec["rank"], tokens,
                                  spec["dtype"], device=device.index,
                                  **spec["bundle_options"])
            try:
                exchange = SymmetricExchange(bundles.exchange_shapes(),
                                             group, device,
                                             rank=bundles.rank)
                bundles.bind(exchange.slices)
            except BaseException:
                bundles.close()
                raise
            rank_layer = _EXPERT_PARALLEL[key] = (bundles, exchange)
    return rank_layer


def _fused_moe_ep(hidden_states: torch.Tensor, router_logits: torch.Tensor,
                  w13: torch.Tensor, w2: torch.Tensor,
                  correction_bias: Optional[torch.Tensor], ep_layer: str,
                  ep_group_name: str) -> torch.Tensor:
    """One MoE layer split over the ranks of a torch.distributed process
    group by its routed experts (moe_mlir.expert_parallel): this rank's
    output [T, H] for its tokens. ``ep_layer`` (_ep_layer's) says which
    rank of which layer, ``ep_group_name`` is the group's group_name; every
    rank of the group calls the op with the same T.

    At its first call at a T on a device the op makes that rank's three
    bundles (dispatch, experts, combine; layer_bundle(expert_parallel=,
    phase=, tokens_max=T, token_buckets=(T,))) and their exchange buffers
    in symmetric memory over the group, which is collective: every rank of
    the group makes them at once. Every call enqueues on torch's current
    stream the dispatch of ``hidden_states`` [T, H] routed by
    ``router_logits`` [T, E] float32 (and the float32 ``correction_bias``
    [E], or None), the rank's experts (``w13`` [L, 2I, H] and ``w2`` [L,
    H, I] in the activation dtype, L = E/W + X: its routed experts, then
    the shared ones), and the combine of its tokens' returned rows into the
    output, each phase waiting on the device for the one before on every
    rank (their completion flags); nothing synchronises the host. FusedMoE.forward checks the tensors; called
    directly, the runtime's checks raise moe_mlir.Error.
    """
    tokens = hidden_states.shape[0]
    output = hidden_states.new_empty(hidden_states.shape)
    if tokens == 0:
        return output
    weights = [("w13", w13), ("w2", w2)]
    if correction_bias is not None:
        weights.append(("correction_bias", correction_bias))
    _check_in_place(weights)
    device = hidden_states.device
    # The exchange buffers are made on the current device.
    with torch.cuda.device(device):
        bundles, exchange = _expert_parallel_rank(ep_layer, ep_group_name,
                                                  tokens, device)
        bundles.forward(_aligned(hidden_states.contiguous()),
                        _aligned(router_logits.contiguous()), [w13, w2],
                        output, exchange.mine, bias=correction_bias,
                        stream=torch.cuda.current_stream(device).cuda_stream)
    return output


def _output_like_hidden_states(hidden_states, *_, **__):
    """The ops' fake implementation: the output has the hidden states'
    shape, dtype and device."""
    return hidden_states.new_empty(hidden_states.shape)


fused_moe = torch.library.custom_op("moe_mlir::fused_moe", _fused_moe,
                                    mutates_args=(), device_types="cuda")
fused_moe_ep = torch.library.custom_op(
    "moe_mlir::fused_moe_ep", _fused_moe_ep, mutates_args=(),
    device_types="cuda")
fused_experts = torch.library.custom_op(
    "moe_mlir::fused_experts", _fused_experts, mutates_args=(),
    device_types="cuda")
fused_moe.register_fake(_output_like_hidden_states)
fused_moe_ep.register_fake(_output_like_hidden_states)
fused_experts.register_fake(_output_like_hidden_states)


def _call(op, implementation, hidden_states, *args):
    """``op`` (hidden_states, *args) where torch.compile, torch.export or
    another tracer sees it (one node of their graph), else
    ``implementation`` directly: in eager mode the dispatcher's Python
    path around a custom op costs tens of microseconds, more than a
    decode step's kernels. Tracers run on fake or proxy tensors, never on
    a plain torch.Tensor."""
    if (torch.compiler.is_compiling()
            or type(hidden_states) is not torch.Tensor):
        return op(hidden_states, *args)
    return implementation(hidden_states, *args)


def quantize_fp8_weights(weights, weight_scaling):
    """(codes, scales): float ``weights`` [..., N, K] (an expert's [N, K],
    or experts' [E, N, K]) as float8_e4m3fn codes and their float32 scales
    per ``weight_scaling`` (moe_mlir.layers.WEIGHT_SCALINGS): [...]
    ("tensor"), [..., N] ("channel") or [..., ceil(N/128), ceil(K/128)]
    ("block"), each max(amax, 1e-10) / 448 of the values it scales (as
    checkpoints are made, and as moe.quantize scales activations), each
    code its value over its scale rounded to the nearest e4m3 value (ties
    to even). Computes in float32 on the weights' device, with a few
    float32 temporaries of their size: quantize a large layer an expert at
    a time.
    """
    if weight_scaling not in layers.WEIGHT_SCALINGS:
        raise ValueError(f"unknown weight_scaling {weight_scaling!r} "
                         f"({', '.join(layers.WEIGHT_SCALINGS)})")
    values = weights.float()
    n, k = values.shape[-2:]
    magnitudes = values.abs()
    if weight_scaling == "tensor":
        amax = magnitudes.amax(dim=(-2, -1))
    elif weight_scaling == "channel":
        amax = magnitudes.amax(dim=-1)
    else:
        block = layers.SCALE_BLOCK
        rows, columns = -(-n // block), -(-k // block)
        padded = torch.nn.functional.pad(
            magnitudes, (0, columns * block - k, 0, rows * block - n))
        amax = padded.unflatten(-1, (columns, block)).unflatten(
            -3, (rows, block)).amax(dim=(-3, -1))
    # A true division: torch divides a CUDA tensor by a Python number as a
    # multiplication by its inverse, a different float now and then.
    scales = amax.clamp(min=1e-10) / torch.full_like(amax, _E4M3_MAX)
    # torch's conversion rounds to nearest even but makes NaN of what is
    # beyond 448 (Hopper's cvt.rn.satfinite saturates): clamp first.
    codes = (values / _scale_of_each(scales, weight_scaling, n, k)).clamp(
        -_E4M3_MAX, _E4M3_MAX).to(_FP8)
    return codes, scales


def _scale_of_each(scales, weight_scaling, n, k):
    """``scales`` broadcast to the elements of the [..., N, K] weights they
    scale."""
    if weight_scaling == "tensor":
        return scales[..., None, None]
    if weight_scaling == "channel":
        return scales[..., None]
    block = layers.SCALE_BLOCK
    return scales.repeat_interleave(block, -2).repeat_interleave(
        block, -1)[..., :n, :k]


def fuse_gate_up(gate_proj, up_proj, gate_scale, up_scale, *,
                 weight_scaling="block"):
    """(w13, w13 scales) of an expert from a checkpoint's fp8 gate_proj and
    up_proj weights ([I, H] each; or stacked experts, [E, I, H]) and their
    scales: gate rows, then up rows, as FusedMoE's w13 and its scales hold
    an expert. With "block" scales (DeepSeek-V3's and Kimi-K2's
    ``weight_scale_inv``, [..., I/128, ceil(H/128)] each) w13's are
    [..., 2I/128, ceil(H/128)] and I must be a multiple of 128: otherwise
    the block astride the seam would need one scale for rows of both; with
    "channel" scales ([..., I] each) they are [..., 2I]. Per-tensor gate
    and up scales cannot share w13's one scale per expert: give each as
    channel scales (the scale repeated for its I rows) instead.

    Loading a checkpoint an expert at a time copies no more than one::

        for e in range(num_experts):
            w13, scales = fuse_gate_up(gate[e], up[e], gate_inv[e], up_inv[e])
            moe.w13[e].copy_(w13)
            moe.w13_weight_scale_inv[e].copy_(scales)
    """
    if weight_scaling not in ("block", "channel"):
        raise ValueError(f"fuse_gate_up takes 'block' or 'channel' scales, "
                         f"got {weight_scaling!r} (per-tensor gate and up "
                         "scales: repeat each for its rows and give them as "
                         "channel scales)")
    if gate_proj.dim() < 2 or gate_proj.shape != up_proj.shape:
        raise ValueError(f"gate_proj and up_proj must have one shape "
                         f"[..., I, H], got {list(gate_proj.shape)} and "
                         f"{list(up_proj.shape)}")
    *experts, intermediate, hidden = gate_proj.shape
    if weight_scaling == "channel":
        scales_shape = [*experts, intermediate]
    else:
        block = layers.SCALE_BLOCK
        if intermediate % block:
            raise ValueError(
                f"fusing gate_proj and up_proj with {block} x {block} block "
                f"scales needs I a multiple of {block}, got I = "
                f"{intermediate}: w13's block astride the gate and up rows "
                "would need one scale for both")
        scales_shape = [*experts, intermediate // block, -(-hidden // block)]
    for name, scale in (("gate_scale", gate_scale), ("up_scale", up_scale)):
        if list(scale.shape) != scales_shape:
            raise ValueError(f"{name} must have shape {scales_shape} "
                             f"({weight_scaling} scales of [..., "
                             f"{intermediate}, {hidden}] weights), got "
                             f"{list(scale.shape)}")
    return (torch.cat([gate_proj, up_proj], dim=-2),
            torch.cat([gate_scale, up_scale], dim=-2 if weight_scaling ==
                      "block" else -1).to(torch.float32))


def quantize_mxfp4_weights(weights):
    """(codes, scales): float ``weights`` [..., N, K] (an expert's [N, K],
    or experts' [E, N, K]; K a multiple of 32) as MXFP4, the way gpt-oss's
    checkpoints are made: codes [..., N, K/2] float4_e2m1fn_x2 (two e2m1
    codes a byte, the even K index in the low nibble) and scales [..., N,
    K/32] float8_e8m0fnu, each the least power of two 2^e (e in [-127,
    127]) with amax / 2^e <= 6 over its 32 values, each code the value over
    its scale rounded to the nearest e2m1 value (ties to the even code; a
    value's sign kept, -0 included). Computes exactly, in float64 on the
    weights' device, with a few float64 temporaries of their size:
    quantize a large layer an expert at a time. Values must be finite.
    """
    k = weights.shape[-1]
    if weights.dim() < 2 or k % layers.MX_BLOCK:
        raise ValueError(f"weights must be [..., N, K] with K a multiple of "
                         f"{layers.MX_BLOCK}, got {list(weights.shape)}")
    blocks = weights.double().unflatten(-1, (k // layers.MX_BLOCK,
                                             layers.MX_BLOCK))
    # amax = m 2^x exactly, m in [0.5, 1): m 2^(x - e) <= 6 holds for
    # e = x - 3 when m <= 0.75, else first for e = x - 2.
    mantissa, exponent = torch.frexp(blocks.abs().amax(dim=-1))
    exponent = (exponent - 2 - (mantissa <= 0.75).int()).clamp(-127, 127)
    # 2^-e exactly, from its float64 bits.
    inverse = ((1023 - exponent.long()) << 52).view(torch.float64)
    scaled = (blocks * inverse[..., None]).flatten(-2)
    magnitudes = scaled.abs()
    midpoints = torch.tensor(_E2M1_MIDPOINTS, dtype=torch.float64,
                             device=weights.device)
    codes = torch.bucketize(magnitudes, midpoints)
    # bucketize sends a magnitude on a midpoint to the lower neighbour:
    # ties go up where that neighbour's code is odd.
    tie = magnitudes == midpoints[codes.clamp(max=len(_E2M1_MIDPOINTS) - 1)]
    codes = (codes + (tie & (codes % 2 == 1))).to(torch.uint8)
    codes |= torch.signbit(scaled).to(torch.uint8) << 3
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return (packed.view(_MXFP4),
            (exponent + 127).to(torch.uint8).view(_E8M0))


def _gate_then_up(tensor, dim):
    """gpt-oss's interleaved gate and up (gate at the even, up at the odd
    indices of dimension ``dim``) as moe's gate half, then up half, in a
    new contiguous tensor."""
    moved = tensor.movedim(dim, 0)
    return torch.cat([moved[0::2], moved[1::2]]).movedim(0, dim).contiguous()


def gpt_oss_weights(gate_up_proj, gate_up_proj_bias, down_proj,
                    down_proj_bias):
    """FusedMoE's (and FusedExperts') expert weights of a gpt-oss layer in
    Hugging Face transformers' layout (GptOssExperts, bf16): {"w13",
    "w13_bias", "w2", "w2_bias"}, new contiguous tensors for the module's
    parameters of those names (``moe.load_state_dict(weights,
    strict=False)``).

    transformers keeps ``gate_up_proj`` [E, H, 2I] (transposed, gate at the
    even and up at the odd columns) and ``gate_up_proj_bias`` [E, 2I]
    interleaved alike, ``down_proj`` [E, I, H] and ``down_proj_bias`` [E,
    H]; moe's w13 is [E, 2I, H] with the gate rows before the up rows, w2
    [E, H, I]. Any leading dimensions (one expert's [H, 2I], ...) are kept.
    """
    hidden, twice = gate_up_proj.shape[-2:]
    if twice % 2 or tuple(down_proj.shape[-2:]) != (twice // 2, hidden):
        raise ValueError(f"gate_up_proj [..., H, 2I] and down_proj [..., I, "
                         f"H] do not fit: {list(gate_up_proj.shape)} and "
                         f"{list(down_proj.shape)}")
    return {"w13": _gate_then_up(gate_up_proj, -1).transpose(-1, -2)
            .contiguous(),
            "w13_bias": _gate_then_up(gate_up_proj_bias, -1),
            "w2": down_proj.transpose(-1, -2).contiguous(),
            "w2_bias": down_proj_bias.contiguous()}


def gpt_oss_mxfp4_weights(gate_up_proj_blocks, gate_up_proj_scales,
                          gate_up_proj_bias, down_proj_blocks,
                          down_proj_scales, down_proj_bias):
    """FusedMoE's (and FusedExperts') MXFP4 expert weights
    (``dtype=torch.float4_e2m1fn_x2``) of a gpt-oss checkpoint's: {"w13",
    "w13_weight_scale", "w13_bias", "w2", "w2_weight_scale", "w2_bias"},
    new contiguous tensors for the module's parameters of those names
    (``moe.load_state_dict(weights, strict=False)``).

    The checkpoint's ``*_blocks`` are uint8 [E, N, K/32, 16] (two e2m1
    codes a byte along K, the even K index in the low nibble, as moe's), its
    ``*_scales`` uint8 e8m0 exponents [E, N, K/32]; gate_up_proj's rows
    (and ``gate_up_proj_bias`` [E, 2I]) interleave gate (even) and up
    (odd), which moe stores as the gate rows then the up rows. The codes
    come back float4_e2m1fn_x2 [E, 2I, H/2] and [E, H, I/2], the scales
    float8_e8m0fnu [E, 2I, H/32] and [E, H, I/32], the biases as given
    ([E, 2I] and ``down_proj_bias`` [E, H]). Any leading dimensions (one
    expert's, ...) are kept, so a checkpoint loads an expert at a time::

        for e in range(num_experts):
            for name, tensor in gpt_oss_mxfp4_weights(
                    gate_up_blocks[e], gate_up_scales[e], gate_up_bias[e],
                    down_blocks[e], down_scales[e], down_bias[e]).items():
                getattr(moe, name)[e].copy_(tensor)
    """
    def codes(name, blocks, scales):
        blocks, scales = blocks.view(torch.uint8), scales.view(torch.uint8)
        if (blocks.dim() < 3 or blocks.shape[-1] != layers.MX_BLOCK // 2
                or blocks.shape[:-1] != scales.shape):
            raise ValueError(f"{name}_blocks must be [..., N, K/32, 16] and "
                             f"{name}_scales [..., N, K/32], got "
                             f"{list(blocks.shape)} and {list(scales.shape)}")
        return blocks.flatten(-2), scales

    w13, w13_scales = codes("gate_up_proj", gate_up_proj_blocks,
                            gate_up_proj_scales)
    w2, w2_scales = codes("down_proj", down_proj_blocks, down_proj_scales)
    if (w13.shape[-2] != 4 * w2.shape[-1]
            or w2.shape[-2] != 2 * w13.shape[-1]):
        raise ValueError(f"gate_up_proj_blocks [..., 2I, H/32, 16] and "
                         f"down_proj_blocks [..., H, I/32, 16] do not fit: "
                         f"{list(gate_up_proj_blocks.shape)} and "
                         f"{list(down_proj_blocks.shape)}")
    return {"w13": _gate_then_up(w13, -2).view(_MXFP4),
            "w13_weight_scale": _gate_then_up(w13_scales, -2).view(_E8M0),
            "w13_bias": _gate_then_up(gate_up_proj_bias, -1),
            "w2": w2.contiguous().view(_MXFP4),
            "w2_weight_scale": w2_scales.contiguous().view(_E8M0),
            "w2_bias": down_proj_bias.contiguous()}


def _copy_codes(target, source):
    """target.copy_(source), byte for byte for MXFP4 codes and e8m0 scales
    (which torch's copy kernels do not all take; ``source`` may be their
    uint8 bytes)."""
    if target.dtype in (_MXFP4, _E8M0):
        target.view(torch.uint8).copy_(source.view(torch.uint8))
    else:
        target.copy_(source)


class _LayerModule(torch.nn.Module):
    """What FusedMoE and FusedExperts share: the layer, the rank's shard of
    it with a tp_group (its experts with an ep_group), its bundle (the
    ``part`` of moe_mlir.layer_bundle) compiled at construction (with an
    ep_group, _ep_layer's description of its bundles, which the op makes
    per token count), the expert weights w13 and w2, their scales
    for fp8 and MXFP4 weights, the static activation scales of fp8 weights
    with them and the expert biases of a layer with them, loading them from
    full-size weights, and the checks of forward's arguments."""

    def __init__(self, layer, part, *, dtype, activation_dtype,
                 weight_scaling, weight_block_size, activation_scheme,
                 device, tokens_max, block_m, cache_dir, config_db,
                 device_name, num_sms, chip, toolkit, tp_group,
                 ep_group=None):
        super().__init__()
        self.layer = layer
        self.dtype = dtype
        self.activation_dtype, self.weight_scaling = _weight_format(
            dtype, activation_dtype, weight_scaling, weight_block_size)
        # The bundle's quantization (layers.QUANTIZATIONS): the weights'
        # scaling, "-static" with static activation scales.
        self.quantization = _quantization(self.weight_scaling,
                                          activation_scheme)
        if tp_group is not None and ep_group is not None:
            raise ValueError("give tp_group or ep_group, not both: a layer "
                             "is split by its intermediate size or by its "
                             "experts, not both yet")
        self.tp_group, self.ep_group = tp_group, ep_group
        self.tp_world_size, self.tp_rank = _group_rank(tp_group, "tp_group")
        self.ep_world_size, self.ep_rank = _group_rank(ep_group, "ep_group")
        # What forward's op takes: a torch.library op takes no process
        # group, but its name.
        self._tp_group_name = (None if tp_group is None
                               else tp_group.group_name)
        self._ep_group_name = (None if ep_group is None
                               else ep_group.group_name)
        if ep_group is None:
            self.shard_layer = layer.tensor_parallel(self.tp_world_size,
                                                     self.weight_scaling)
        else:
            self.shard_layer = layer.expert_shard(self.ep_world_size)
            _check_expert_parallel(layer, self.quantization)
        self.tokens_max = tokens_max
        on_cuda = ((device is None or torch.device(device).type == "cuda")
                   and torch.cuda.is_available())
        if device_name is None:
            device_name = (torch.cuda.get_device_name(device) if on_cuda
                           else layers.DEFAULT_DEVICE_NAME)
        if num_sms is None:
            num_sms = (torch.cuda.get_device_properties(
                device if device is not None
                else torch.cuda.current_device()).multi_processor_count
                if on_cuda else layers.DEFAULT_NUM_SMS)
        # Paths as text, which _ep_layer's JSON takes.
        bundle_options = {
            "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
            "config_db": None if config_db is None else os.fspath(config_db),
            "block_m": block_m, "device_name": device_name,
            "num_sms": num_sms, "chip": chip, "toolkit": toolkit}
        dtype_name = _LAYER_DTYPES[self.activation_dtype]
        # An expert-parallel layer's bundles are per token count: the op
        # makes them at its first call at each.
        self.bundle_path, self._ep_layer = None, None
        if ep_group is not None:
            self._ep_layer = _ep_layer(layer, dtype_name, self.ep_world_size,
                                       self.ep_rank, bundle_options)
        else:
            try:
                self.bundle_path = layers.layer_bundle(
                    self.shard_layer, dtype_name,
                    quantization=self.quantization, part=part,
                    tokens_max=tokens_max, **bundle_options)
            except Error as error:
                raise Error(f"{type(self).__name__} has no GPU bundle for "
                            f"its layer: {error}") from error
        shard, scaling = self.shard_layer, self.weight_scaling
        # MXFP4 scales are e8m0 exponents, fp8 ones float32.
        self._scale_dtype = (_E8M0 if scaling == layers.MXFP4
                             else torch.float32)
        parameters = [("w13", shard.w13_stored_shape(scaling), dtype),
                      ("w2", shard.w2_stored_shape(scaling), dtype)]
        parameters += [(name, shape, self._scale_dtype)
                       for name, shape in self._scale_shapes()]
        if layer.expert_biases:
            parameters += [
                ("w13_bias", shard.w13_bias_shape, self.activation_dtype),
                ("w2_bias", shard.w2_bias_shape, self.activation_dtype)]
        else:
            self.register_parameter("w13_bias", None)
            self.register_parameter("w2_bias", None)
        if layers.is_static(self.quantization):
            parameters += [(name, layers.INPUT_SCALE_SHAPE, torch.float32)
                           for name in _INPUT_SCALE_NAMES]
        else:
            for name in _INPUT_SCALE_NAMES:
                self.register_parameter(name, None)
        for name, shape, parameter_dtype in parameters:
            setattr(self, name, torch.nn.Parameter(
                torch.empty(shape, dtype=parameter_dtype, device=device),
                requires_grad=False))

    def _scale_shapes(self):
        """(parameter name, shape) of w13's and w2's scales (the rank's
        shard); none for weights in the activations' dtype."""
        scaling = self.weight_scaling
        if scaling is None:
            return []
        return list(zip(_SCALE_NAMES[scaling],
                        (self.shard_layer.w13_scales_shape(scaling),
                         self.shard_layer.w2_scales_shape(scaling))))

    def _scales(self):
        """The scale parameters of w13 and w2, (None, None) for weights in
        the activations' dtype: arguments of the ops."""
        return tuple(getattr(self, name)
                     for name, _ in self._scale_shapes()) or (None, None)

    def _biases(self):
        """The expert biases (w13_bias, w2_bias), (None, None) for a layer
        without: arguments of the ops."""
        return self.w13_bias, self.w2_bias

    def _input_scales(self):
        """The static activation scales (w13_input_scale, w2_input_scale),
        (None, None) for activations scaled at run time: the ops' last
        arguments."""
        return self.w13_input_scale, self.w2_input_scale

    def reset_parameters(self):
        """Weights uniform in +-1/sqrt(fan-in), as nn.Linear's, the fan-in
        the whole layer's (H for w13, I for w2, also on a tensor-parallel
        rank), and expert biases alike; fp8 and MXFP4 weights quantized
        from such values, an expert at a time (no float32 copy of all
        experts), with their scales (quantize_fp8_weights,
        quantize_mxfp4_weights); static activation scales 1, as vLLM
        initialises them (a checkpoint's, or a calibration's, replace
        them)."""
        scales, biases = self._scales(), self._biases()
        scaling = self.weight_scaling
        with torch.no_grad():
            for input_scale in self._input_scales():
                if input_scale is not None:
                    input_scale.fill_(1.0)
            for weight, scale, bias, fan_in, shape in (
                    (self.w13, scales[0], biases[0], self.layer.hidden_size,
                     self.shard_layer.w13_shape),
                    (self.w2, scales[1], biases[1],
                     self.layer.intermediate_size,
                     self.shard_layer.w2_shape)):
                bound = 1 / math.sqrt(fan_in)
                if bias is not None:
                    bias.uniform_(-bound, bound)
                if scale is None:
                    weight.uniform_(-bound, bound)
                    continue
                for expert in range(weight.shape[0]):
                    values = torch.empty(shape[1:], dtype=torch.float32,
                                         device=weight.device)
                    values.uniform_(-bound, bound)
                    codes, expert_scales = (
                        quantize_mxfp4_weights(values)
                        if scaling == layers.MXFP4
                        else quantize_fp8_weights(values, scaling))
                    _copy_codes(weight[expert], codes)
                    _copy_codes(scale[expert], expert_scales)

    def load_full_weights(self, w13, w2, w13_scales=None, w2_scales=None, *,
                          w13_bias=None, w2_bias=None, w13_input_scale=None,
                          w2_input_scale=None):
        """Copies the module's shard of a whole layer's expert weights into
        its parameters: all of them without a group; with a tp_group the
        rows and columns Layer.shard_slices gives this rank (with i = I /
        world and r the rank: w13's gate rows [r*i, (r+1)*i) and up rows
        [I + r*i, I + (r+1)*i), w2's columns [r*i, (r+1)*i), and the scales
        of those rows and columns); with an ep_group the experts
        Layer.expert_slices gives it (with e = E / world: the routed
        experts [r*e, (r+1)*e), then the shared ones [E, E+X)). ``w13``
        [E+X, 2I, H] and ``w2`` [E+X, H, I] in
        the module's dtype (MXFP4: [E+X, 2I, H/2] and [E+X, H, I/2], packed
        float4_e2m1fn_x2 or their uint8 bytes) and, for fp8 weights,
        ``w13_scales`` and ``w2_scales`` (any float dtype, stored as
        float32; MXFP4: float8_e8m0fnu or uint8) have the whole layer's
        shapes (those of the module's parameters without a group); they
        may be on any device (the CPU, a memory-mapped checkpoint): only
        the rank's slices are read. The expert biases ``w13_bias`` [E+X,
        2I] and ``w2_bias`` [E+X, H] (any float dtype) of a layer with them
        replace the module's (None leaves them), as do the static
        activation scales ``w13_input_scale`` and ``w2_input_scale`` of a
        module with them (activation_scheme="static"): a scalar, [1], or
        vLLM's one per expert, [E+X] (the shared experts' too), which is
        reduced to its largest, as vLLM does, since one scale serves each
        GEMM's input (any float dtype; every rank holds them whole). Checks
        every tensor before copying any: TypeError for a wrong type or
        dtype, ValueError for a wrong shape, for scales given to weights
        without (or missing from quantized ones), input scales to a module
        without or biases to a layer without, naming the tensor."""
        layer, scaling = self.layer, self.weight_scaling
        full = [("w13", w13, self.w13, layer.w13_stored_shape(scaling)),
                ("w2", w2, self.w2, layer.w2_stored_shape(scaling))]
        given_scales = (("w13_scales", w13_scales), ("w2_scales", w2_scales))
        for name, scale in given_scales:
            if scaling is None and scale is not None:
                raise ValueError(f"{name} given, but the module's weights "
                                 f"are {self.dtype}, without scales")
            if scaling is not None and scale is None:
                raise ValueError(f"{name} missing: {self.dtype} weights "
                                 f"with {scaling} scales need w13_scales "
                                 "and w2_scales")
        if scaling is not None:
            full += [(name, scale, parameter, shape)
                     for (name, scale), parameter, shape in zip(
                         given_scales, self._scales(),
                         (layer.w13_scales_shape(scaling),
                          layer.w2_scales_shape(scaling)))]
        for (name, bias), parameter, shape in zip(
                (("w13_bias", w13_bias), ("w2_bias", w2_bias)),
                self._biases(), (layer.w13_bias_shape, layer.w2_bias_shape)):
            if bias is not None:
                if parameter is None:
                    raise ValueError(f"{name} given, but the layer has no "
                                     "expert biases")
                full.append((name, bias, parameter, shape))
        input_scales = []
        for (name, scale), parameter in zip(
                (("w13_input_scale", w13_input_scale),
                 ("w2_input_scale", w2_input_scale)), self._input_scales()):
            if scale is None:
                continue
            if parameter is None:
                raise ValueError(f"{name} given, but the module scales its "
                                 "activations at run time (static scales "
                                 "need activation_scheme='static')")
            _check_input_scale(name, scale, layer.num_stored_experts)
            input_scales.append((scale, parameter))
        for index, (name, tensor, parameter, shape) in enumerate(full):
            if (parameter.dtype in (_MXFP4, _E8M0)
                    and isinstance(tensor, torch.Tensor)
                    and tensor.dtype == torch.uint8):
                # A checkpoint's bytes of MXFP4 codes or e8m0 scales.
                tensor = tensor.view(parameter.dtype)
                full[index] = (name, tensor, parameter, shape)
            # Any float for fp8 scales and biases, which copy_ converts.
            exact = name in ("w13", "w2") or parameter.dtype == _E8M0
            _check_full_weight(
                name, tensor, parameter.dtype if exact else None, shape)
        slices = (layer.shard_slices(self.tp_world_size, self.tp_rank,
                                     scaling) if self.ep_group is None
                  else layer.expert_slices(self.ep_world_size, self.ep_rank,
                                           scaling))
        whole = [((Ellipsis,), (Ellipsis,))]
        with torch.no_grad():
            for name, tensor, parameter, _ in full:
                for shard_index, full_index in slices.get(name, whole):
                    _copy_codes(parameter[shard_index], tensor[full_index])
            for scale, parameter in input_scales:
                parameter.copy_(scale.detach().float().amax().reshape(
                    layers.INPUT_SCALE_SHAPE))

    def _weights(self):
        """(name, parameter, dtype, shape) of each weight the bundle takes,
        in its order: w13, w2, the router's (_router_weights), the expert
        biases, the scales, the static activation scales."""
        shard, scaling = self.shard_layer, self.weight_scaling
        weights = [("w13", self.w13, self.dtype,
                    shard.w13_stored_shape(scaling)),
                   ("w2", self.w2, self.dtype,
                    shard.w2_stored_shape(scaling))]
        weights += self._router_weights()
        if self.w13_bias is not None:
            weights += [("w13_bias", self.w13_bias, self.activation_dtype,
                         shard.w13_bias_shape),
                        ("w2_bias", self.w2_bias, self.activation_dtype,
                         shard.w2_bias_shape)]
        weights += [(name, getattr(self, name), self._scale_dtype, shape)
                    for name, shape in self._scale_shapes()]
        if layers.is_static(self.quantization):
            weights += [(name, getattr(self, name), torch.float32,
                         layers.INPUT_SCALE_SHAPE)
                        for name in _INPUT_SCALE_NAMES]
        return weights

    def _router_weights(self):
        """The router's weights in _weights' form: none for experts."""
        return []

    def _describe_weights(self):
        """extra_repr's words for gpt-oss's activation and biases, the
        dtypes, the weights' scaling and the tensor- or expert-parallel
        rank."""
        words = f"dtype={self.dtype}"
        if self.layer.swiglu is not None:
            words = f"swiglu={self.layer.swiglu}, " + words
        if self.layer.expert_biases:
            words = "expert_biases=True, " + words
        if self.weight_scaling is not None:
            words += (f", weight_scaling={self.weight_scaling}, "
                      f"activation_dtype={self.activation_dtype}")
        if layers.is_static(self.quantization):
            words += ", activation_scheme=static"
        if self.tp_group is not None:
            words += (f", tp_rank={self.tp_rank} of {self.tp_world_size} "
                      f"(intermediate_size "
                      f"{self.shard_layer.intermediate_size} each)")
        if self.ep_group is not None:
            words += (f", ep_rank={self.ep_rank} of {self.ep_world_size} "
                      f"({self.shard_layer.num_experts} routed experts "
                      "each)")
        return words

    def _check_arguments(self, hidden_states, routing):
        """Checks forward's arguments and the parameters for what the
        bundle takes: ``hidden_states`` [T, H] in the layer's activation
        dtype on a CUDA device, each of ``routing`` ((name, tensor, width,
        floating)) [T, width] on that device, floating-point or of an
        integer type of _ID_DTYPES as ``floating`` says, T at most
        tokens_max, and each weight of _weights of its dtype and shape on
        that device. Raises TypeError for wrong types, ValueError for wrong
        shapes or devices, naming the tensor and what it must be. Reads
        only tensors' metadata, so that torch.compile traces it."""
        hidden_size = self.layer.hidden_size
        for name, tensor in ([("hidden_states", hidden_states)]
                             + [entry[:2] for entry in routing]):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got "
                                f"{type(tensor).__name__}")
        if not _has_shape(hidden_states, (None, hidden_size)):
            raise ValueError(f"hidden_states must have shape [T, "
                             f"{hidden_size}], got "
                             f"{list(hidden_states.shape)}")
        tokens = hidden_states.shape[0]
        for name, tensor, width, _ in routing:
            if not _has_shape(tensor, (tokens, width)):
                raise ValueError(f"{name} must have shape [{tokens}, "
                                 f"{width}] (T from hidden_states), got "
                                 f"{list(tensor.shape)}")
        if hidden_states.dtype != self.activation_dtype:
            raise TypeError(f"hidden_states must be {self.activation_dtype} "
                            f"(the layer's activation dtype), got "
                            f"{hidden_states.dtype}")
        for name, tensor, _, floating in routing:
            if floating and not tensor.is_floating_point():
                raise TypeError(f"{name} must be floating-point, got "
                                f"{tensor.dtype}")
            if not floating and tensor.dtype not in _ID_DTYPES:
                raise TypeError(f"{name} must have an integer dtype "
                                f"({_ID_DTYPE_NAMES}), got {tensor.dtype}")
        device = hidden_states.device
        if device.type != "cuda":
            raise ValueError(f"hidden_states must be on a CUDA device, got "
                             f"{device}")
        for name, tensor, _, _ in routing:
            if tensor.device != device:
                raise ValueError(f"{name} are on {tensor.device}, "
                                 f"hidden_states on {device}")
        for name, weight, dtype, shape in self._weights():
            if weight.dtype != dtype:
                raise TypeError(f"{name} is {weight.dtype}, but the bundle "
                                f"was compiled for {dtype} (module.to(dtype) "
                                "converts every floating-point parameter; "
                                f"construct {type(self).__name__} with the "
                                "dtype instead)")
            if not _has_shape(weight, shape):
                raise ValueError(f"{name} must have shape {list(shape)}, got "
                                 f"{list(weight.shape)}")
            if weight.device != device:
                raise ValueError(f"{name} is on {weight.device} and "
                                 f"hidden_states on {device}; move the "
                                 "module with .to(device)")
        if tokens > self.tokens_max:
            raise ValueError(f"{tokens} tokens exceed the bundle's "
                             f"tokens_max ({self.tokens_max}); construct "
                             f"{type(self).__name__} with a larger "
                             "tokens_max")


class FusedMoE(_LayerModule):
    """One MoE layer (moe.fused_moe) on CUDA through its compiled bundle.

    The layer comes from a preset (``FusedMoE(preset="deepseek-v3")``), a
    moe_mlir.Layer (``layer=``), or sizes and router arguments::

        FusedMoE(num_experts, hidden_size, intermediate_size, top_k,
                 scoring="sigmoid", num_groups=8, topk_groups=4,
                 renormalize=True, routed_scaling_factor=2.5,
                 num_shared_experts=1, correction_bias=True)

    Parameters (inference only, no autograd): ``w13`` [E+X, 2I, H] (gate
    rows, then up rows) and ``w2`` [E+X, H, I] in ``dtype``, the X shared
    experts after the E routed ones; with ``correction_bias`` a float32
    ``correction_bias`` [E], added to the scores for selection only. Load
    them with load_state_dict, copy_ into them, or load_full_weights.

    FP8 weights, as DeepSeek-V3's and Kimi-K2's Hugging Face checkpoints
    ship them: ``dtype=torch.float8_e4m3fn`` with
    ``weight_block_size=(128, 128)`` (vLLM's name) makes w13 and w2 e4m3
    with float32 scales per 128 x 128 block, ``w13_weight_scale_inv``
    [E+X, ceil(2I/128), ceil(H/128)] and ``w2_weight_scale_inv`` [E+X,
    ceil(H/128), ceil(I/128)]; ``weight_scaling="channel"`` gives one scale
    per output row instead, ``w13_weight_scale`` [E+X, 2I] and
    ``w2_weight_scale`` [E+X, H], and ``weight_scaling="tensor"`` one per
    expert, [E+X] each. Every weight stands for its e4m3 value times its
    scale. The activations are quantized to e4m3 at run time, per token
    and 128 columns with block scales, per token with the others
    (moe.quantize); hidden states come in and go out in
    ``activation_dtype`` (default bfloat16). fuse_gate_up makes w13 and its
    scales from a checkpoint's gate_proj and up_proj, and
    quantize_fp8_weights quantizes higher-precision weights.
    ``activation_scheme="static"`` (the checkpoints' and vLLM's name; the
    default None is "dynamic") with channel or tensor scales quantizes the
    activations by two static scales instead, float32 parameters
    ``w13_input_scale`` [1] (of the hidden states) and ``w2_input_scale``
    [1] (of the activation's output): each value over its scale, rounded
    to the nearest e4m3 value, saturating at +-448. vLLM's checkpoints give
    one per expert, [E], which vLLM reduces to the largest:
    load_full_weights does the same (a fresh module has 1, vLLM's initial
    value). Block-scaled weights pair with dynamic activation scales only.

    gpt-oss (``preset="gpt-oss-20b"`` or ``"gpt-oss-120b"``, or a Layer with
    ``swiglu`` and ``expert_biases``): the experts gate with the clamped
    SwiGLU, and ``w13_bias`` [E+X, 2I] and ``w2_bias`` [E+X, H] in the
    activation dtype add to each expert's projections. Its MXFP4 weights
    (W4A16) as vLLM names them: ``dtype=torch.float4_e2m1fn_x2`` makes w13
    [E+X, 2I, H/2] and w2 [E+X, H, I/2] packed e2m1 codes (two a byte along
    K, the even K index in the low nibble) with ``w13_weight_scale`` [E+X,
    2I, H/32] and ``w2_weight_scale`` [E+X, H, I/32] float8_e8m0fnu
    exponents, a weight standing for its e2m1 value times 2^(scale - 127);
    the activations stay bfloat16 (the kernels decode the weights to it).
    gpt_oss_mxfp4_weights converts a gpt-oss checkpoint's ``*_blocks``,
    ``*_scales`` and biases, gpt_oss_weights transformers' bf16
    GptOssExperts, and quantize_mxfp4_weights quantizes other weights.

    The bundle is compiled at construction (moe_mlir.layer_bundle, cached in
    ``cache_dir``; a machine without the compiler needs it there already)
    for up to ``tokens_max`` tokens, with the grouped matmuls' tile configs
    from ``config_db`` (a moe-tune database) and the shipped database for
    the CUDA device named ``device_name``, with K splits and persistent
    grids sized for ``num_sms`` multiprocessors (defaults: the name and the
    multiprocessor count of ``device``, or of the current CUDA device).
    forward checks its arguments and calls the op
    ``torch.ops.moe_mlir.fused_moe``, so that torch.compile(fullgraph=True)
    and torch.export see one node; the op loads the bundle onto a device at
    its first call there, allocates only the output, through torch, and
    enqueues the layer on torch's current stream without synchronising, so
    a forward can be captured in a CUDA graph once one has run on that
    device. Modules of one layer share its loaded bundle and its
    workspaces: run them on one stream, not on concurrent ones.

    Tensor parallel: with ``tp_group`` (a torch.distributed process group,
    NCCL's for CUDA tensors; None, the default, runs on one GPU) each rank
    of the group holds I / world of every expert, routed and shared
    (Layer.tensor_parallel; its ``shard_layer``), and compiles that layer's
    bundle; its parameters are its shard, w13 [E+X, 2I/world, H] (its gate
    rows, then its up rows), w2 [E+X, H, I/world], block scales of those
    rows and columns, channel scales of w13's rows and w2's whole, tensor
    scales and the correction bias whole: load_full_weights copies them out
    of the whole layer's weights. I must be divisible by world, and with
    block scales I / world must be a multiple of 128 (a block astride two ranks
    would need one scale for both); ValueError says so at construction.
    Every rank routes every token from the same logits, runs its layer and
    sums the outputs with ``torch.distributed.all_reduce`` on the group,
    inside the op: torch.compile still sees one node, and CUDA graphs
    capture the all-reduce as NCCL enqueues it. Every rank of the group
    must therefore call forward with the same arguments, in the same order
    as its other collectives. The output is the sum of the ranks' outputs,
    each rounded to the activation dtype first, so it rounds differently
    from the one-GPU layer's (within that dtype's tolerance); with channel
    or tensor fp8 scales each rank also quantizes the intermediate
    activations per token over its own columns only.

    Expert parallel: with ``ep_group`` (a torch.distributed process group
    of W ranks, a GPU each, within one node; not with ``tp_group``) rank R
    of the group holds the routed experts R*E/W .. (R+1)*E/W - 1 and every
    shared expert (moe_mlir.expert_parallel): its parameters are w13 [L,
    2I, H] and w2 [L, H, I], L = E/W + X, those experts in that order (its
    ``shard_layer``, Layer.expert_shard, has their shapes), and the
    correction bias whole; load_full_weights copies them out of the whole
    layer's weights (Layer.expert_slices). E must be divisible by W
    (ValueError); fp8 and MXFP4 weights and expert biases raise
    NotImplementedError for now (their bundles compile, but no GPU test
    has run them). Each rank routes its own tokens over all E experts and
    sends each routed slot's row to the rank that holds the slot's expert,
    straight into that rank's receive buffers; each rank runs its experts
    on the rows it received and stores each output row back into its
    token's rank, which sums its tokens' rows in slot order, as one GPU
    does: three bundles (dispatch, experts, combine), each waiting on the
    device for the one before on every rank (moe_mlir.expert_parallel's
    RankBundles and SymmetricExchange), all on torch's current stream,
    inside the op ``torch.ops.moe_mlir.fused_moe_ep``, so that
    torch.compile(fullgraph=True) still sees one node. The output is the
    rank's own tokens' layer, within the dtype's tolerance of the one-GPU
    module's (its grouped matmuls may take other tiles).

    Every rank of the group must call forward with the same T, each with
    its own tokens: the exchange buffers are sized for T (serving engines
    pad their data-parallel ranks to a common T, as their CUDA graphs need
    anyway), up to ``tokens_max``. The bundles are compiled per T, at the
    first forward at that T (a machine without the compiler finds them in
    ``cache_dir``: layer_bundle(layer, expert_parallel=(W, R), phase=...,
    tokens_max=T, token_buckets=(T,)), with the module's other bundle
    options, for each phase); that forward also allocates the exchange
    buffers in torch's symmetric memory over the group and binds them,
    which is collective and blocks, so every rank makes its first forward
    at a T at once, and not during CUDA-graph capture. Nothing else
    synchronises the host: once a forward at a T has run, forwards at that
    T can be captured in a CUDA graph. A rank's exchange buffers take
    (E + W*X)*T rows of H, T*S returned rows and their weights and slots,
    at each T it ran; modules of one layer, group and dtype share them and
    the bundles: run them on one stream. NVLink multicast must stay off
    (moe_mlir.testing.distributed.MULTICAST_OFF, set before torch starts).
    """

    def __init__(self, num_experts=None, hidden_size=None,
                 intermediate_size=None, top_k=None, *, scoring=None,
                 num_groups=None, topk_groups=None, renormalize=None,
                 routed_scaling_factor=None, num_shared_experts=None,
                 correction_bias=None, preset=None, reduced=False, layer=None,
                 dtype=torch.bfloat16, activation_dtype=None,
                 weight_scaling=None, weight_block_size=None,
                 activation_scheme=None, device=None, tokens_max=16384,
                 block_m=0, cache_dir=None, config_db=None, device_name=None,
                 num_sms=None, chip=layers.DEFAULT_CHIP,
                 toolkit=layers.DEFAULT_CUDA_TOOLKIT, tp_group=None,
                 ep_group=None):
        layer = _make_layer(
            preset, reduced, layer,
            sizes=(num_experts, hidden_size, intermediate_size, top_k),
            router_args={"scoring": scoring, "num_groups": num_groups,
                         "topk_groups": topk_groups,
                         "renormalize": renormalize,
                         "routed_scaling_factor": routed_scaling_factor,
                         "num_shared_experts": num_shared_experts},
            correction_bias=correction_bias)
        super().__init__(
            layer, "layer", dtype=dtype, activation_dtype=activation_dtype,
            weight_scaling=weight_scaling,
            weight_block_size=weight_block_size,
            activation_scheme=activation_scheme, device=device,
            tokens_max=tokens_max, block_m=block_m, cache_dir=cache_dir,
            config_db=config_db, device_name=device_name, num_sms=num_sms,
            chip=chip, toolkit=toolkit, tp_group=tp_group, ep_group=ep_group)
        if layer.correction_bias:
            self.correction_bias = torch.nn.Parameter(
                torch.empty(layer.num_experts, dtype=torch.float32,
                            device=device),
                requires_grad=False)
        else:
            self.register_parameter("correction_bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Weights uniform in +-1/sqrt(fan-in), as nn.Linear's (fp8 ones
        quantized from such values); bias 0."""
        super().reset_parameters()
        if self.correction_bias is not None:
            with torch.no_grad():
                self.correction_bias.zero_()

    def load_full_weights(self, w13, w2, w13_scales=None, w2_scales=None, *,
                          correction_bias=None, w13_bias=None, w2_bias=None,
                          w13_input_scale=None, w2_input_scale=None):
        """_LayerModule.load_full_weights: the rank's shard of the whole
        layer's w13, w2 and their scales, the expert biases, the static
        activation scales; and
        ``correction_bias`` [E] (any float dtype), which every rank holds
        whole (None leaves the module's as it is; a layer without one
        takes none)."""
        if correction_bias is not None:
            if self.correction_bias is None:
                raise ValueError("correction_bias given, but the layer has "
                                 "none")
            _check_full_weight("correction_bias", correction_bias, None,
                               (self.layer.num_experts,))
        super().load_full_weights(w13, w2, w13_scales, w2_scales,
                                  w13_bias=w13_bias, w2_bias=w2_bias,
                                  w13_input_scale=w13_input_scale,
                                  w2_input_scale=w2_input_scale)
        if correction_bias is not None:
            with torch.no_grad():
                self.correction_bias.copy_(correction_bias)

    def forward(self, hidden_states, router_logits):
        """The layer's output [T, H] in the layer's activation dtype.

        ``hidden_states`` [T, H] in the layer's activation dtype (its dtype
        unless the weights are quantized) and ``router_logits``
        [T, E] (any float dtype; routing computes in float32, so they are
        converted) on the parameters' CUDA device. Wrong types raise
        TypeError, wrong shapes or devices ValueError. With a tp_group,
        every rank of it calls forward alike, and the output is the whole
        layer's on every rank. With an ep_group, every rank of it calls
        forward with the same T, each with its own tokens, and gets their
        output.
        """
        self._check_arguments(hidden_states, [
            ("router_logits", router_logits, self.layer.num_experts, True)])
        if self._ep_layer is not None:
            return _call(torch.ops.moe_mlir.fused_moe_ep, _fused_moe_ep,
                         hidden_states, router_logits.to(torch.float32),
                         self.w13, self.w2, self.correction_bias,
                         self._ep_layer, self._ep_group_name)
        return _call(torch.ops.moe_mlir.fused_moe, _fused_moe, hidden_states,
                     router_logits.to(torch.float32), self.w13, self.w2,
                     self.correction_bias, self.bundle_path, *self._scales(),
                     self._tp_group_name, *self._biases(),
                     *self._input_scales())

    def extra_repr(self):
        layer, router = self.layer, self.layer.router
        return (f"num_experts={layer.num_experts}+"
                f"{router.num_shared_experts}, "
                f"hidden_size={layer.hidden_size}, "
                f"intermediate_size={layer.intermediate_size}, "
                f"router=<{router.params()}>, "
                f"correction_bias={layer.correction_bias}, "
                f"{self._describe_weights()}")

    def _router_weights(self):
        if self.correction_bias is None:
            return []
        return [("correction_bias", self.correction_bias, torch.float32,
                 (self.layer.num_experts,))]


class FusedExperts(_LayerModule):
    """A MoE layer's experts without its router (moe.fused_experts) on CUDA
    through their compiled bundle: the caller routes, as serving engines
    do (vLLM's FusedMoE takes topk_ids and topk_weights), and the bundle
    aligns the routed tokens to expert blocks, runs both grouped matmuls
    and combines each token's slots.

    The experts come from sizes, a moe_mlir.Layer (``layer=``, whose router
    fields other than top_k and num_shared_experts do not matter) or a
    preset::

        FusedExperts(num_experts, hidden_size, intermediate_size, top_k,
                     num_shared_experts=1)

    Each token has S = top_k + num_shared_experts slots: the caller's ids
    name the shared experts (E..E+X-1) as well, with their weights.
    Parameters, the bundle and its keywords (dtype, activation_dtype,
    weight_scaling, weight_block_size, activation_scheme, device,
    tokens_max, block_m, cache_dir, config_db, device_name, num_sms, chip,
    toolkit, tp_group) are those of FusedMoE, fp8 and MXFP4 weights and
    their scales, static activation scales, gpt-oss's expert biases and the
    tensor parallel shards included, without the correction bias; forward
    calls the op ``torch.ops.moe_mlir.fused_experts``, with FusedMoE's
    rules for torch.compile, torch.export, CUDA graphs, streams and
    tensor-parallel groups (every rank gives the same ids and weights).
    """

    def __init__(self, num_experts=None, hidden_size=None,
                 intermediate_size=None, top_k=None, *,
                 num_shared_experts=None, preset=None, reduced=False,
                 layer=None, dtype=torch.bfloat16, activation_dtype=None,
                 weight_scaling=None, weight_block_size=None,
                 activation_scheme=None, device=None, tokens_max=16384,
                 block_m=0, cache_dir=None, config_db=None, device_name=None,
                 num_sms=None, chip=layers.DEFAULT_CHIP,
                 toolkit=layers.DEFAULT_CUDA_TOOLKIT, tp_group=None):
        layer = _make_layer(
            preset, reduced, layer,
            sizes=(num_experts, hidden_size, intermediate_size, top_k),
            router_args={"num_shared_experts": num_shared_experts},
            correction_bias=None)
        super().__init__(
            layer, "experts", dtype=dtype, activation_dtype=activation_dtype,
            weight_scaling=weight_scaling,
            weight_block_size=weight_block_size,
            activation_scheme=activation_scheme, device=device,
            tokens_max=tokens_max, block_m=block_m, cache_dir=cache_dir,
            config_db=config_db, device_name=device_name, num_sms=num_sms,
            chip=chip, toolkit=toolkit, tp_group=tp_group)
        self.reset_parameters()

    def forward(self, hidden_states, topk_ids, topk_weights):
        """The experts' output [T, H] in the layer's activation dtype.

        ``hidden_states`` [T, H] in the layer's activation dtype (its dtype
        unless the weights are quantized); ``topk_ids`` [T, S]
        of an integer type (torch.topk's int64 is converted to int32 on the
        device, ids outside [0, E+X) becoming -1 first so that none beyond
        int32's range wraps into a valid one; such ids add nothing) and
        ``topk_weights`` [T, S] of any float type (converted to float32),
        on the parameters' CUDA device. Wrong types raise TypeError, wrong
        shapes or devices ValueError.
        """
        layer = self.layer
        slots = layer.router.num_slots
        self._check_arguments(hidden_states, [
            ("topk_ids", topk_ids, slots, False),
            ("topk_weights", topk_weights, slots, True)])
        return _call(torch.ops.moe_mlir.fused_experts, _fused_experts,
                     hidden_states,
                     _int32_ids(topk_ids, layer.num_stored_experts),
                     topk_weights.to(torch.float32), self.w13, self.w2,
                     self.bundle_path, *self._scales(), self._tp_group_name,
                     *self._biases(), *self._input_scales())

    def extra_repr(self):
        layer = self.layer
        return (f"num_experts={layer.num_experts}+"
                f"{layer.router.num_shared_experts}, "
                f"hidden_size={layer.hidden_size}, "
                f"intermediate_size={layer.intermediate_size}, "
                f"top_k={layer.router.top_k}, {self._describe_weights()}")


def _group_rank(group, name):
    """(world size, rank) of this process in ``group`` (a torch.distributed
    process group, the argument ``name``), (1, 0) for None."""
    if group is None:
        return 1, 0
    if not (torch.distributed.is_available()
            and isinstance(group, torch.distributed.ProcessGroup)):
        raise TypeError(f"{name} must be a torch.distributed.ProcessGroup "
                        f"or None, got {type(group).__name__}")
    rank = torch.distributed.get_rank(group)
    if rank < 0:
        raise ValueError(f"this process is not a rank of {name}")
    return torch.distributed.get_world_size(group), rank


def _check_expert_parallel(layer, quantization):
    """Raises NotImplementedError for what an expert-parallel module does
    not take yet: quantized weights and expert biases, which the phases'
    bundles compile with (moe-compile --phase) but which no GPU test has
    run through the experts phase."""
    missing = []
    if quantization is not None:
        missing.append("MXFP4 weights" if quantization == layers.MXFP4
                       else f"fp8 weights ({quantization} scales)")
    if layer.expert_biases:
        missing.append("expert biases (gpt-oss)")
    if missing:
        raise NotImplementedError(
            f"ep_group with {' and '.join(missing)}: the expert-parallel "
            "phases compile with them, but no GPU test has run their "
            "experts phase yet (test/GPU/ep_test.py and ep_dist_test.py "
            "run weights in the activations' dtype without expert biases)")


def _check_full_weight(name, tensor, dtype, shape):
    """Raises TypeError unless ``tensor`` is a torch.Tensor of ``dtype``
    (None: any floating-point one), ValueError unless of ``shape`` (a whole
    layer's, which load_full_weights takes)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got "
                        f"{type(tensor).__name__}")
    if dtype is not None and tensor.dtype != dtype:
        raise TypeError(f"{name} must be {dtype} (the module's), got "
                        f"{tensor.dtype}")
    if dtype is None and not tensor.is_floating_point():
        raise TypeError(f"{name} must be floating-point, got {tensor.dtype}")
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} must have the whole layer's shape "
                         f"{list(shape)}, got {list(tensor.shape)}")


def _check_input_scale(name, tensor, num_stored_experts):
    """Raises TypeError unless ``tensor`` is a floating-point torch.Tensor,
    ValueError unless a scalar, [1] or one per expert [num_stored_experts]
    (what load_full_weights takes of a static activation scale)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got "
                        f"{type(tensor).__name__}")
    if not tensor.is_floating_point():
        raise TypeError(f"{name} must be floating-point, got {tensor.dtype}")
    if tuple(tensor.shape) not in ((), (1,), (num_stored_experts,)):
        raise ValueError(f"{name} must have shape [], [1] or "
                         f"[{num_stored_experts}] (one per expert, the "
                         "shared ones included, reduced to the largest), "
                         f"got {list(tensor.shape)}")


def _has_shape(tensor, shape):
    """Whether ``tensor`` has ``shape`` (None: any size), compared a
    dimension at a time so that symbolic sizes under torch.compile
    compare as sizes."""
    if tensor.dim() != len(shape):
        return False
    for size, expected in zip(tensor.shape, shape):
        if expected is not None and size != expected:
            return False
    return True


def _int32_ids(topk_ids, num_stored_experts):
    """``topk_ids`` as the int32 the bundle reads, which ignores ids
    outside [0, num_stored_experts). int64 ids are clamped to
    [-1, num_stored_experts] first, so that none wraps into a valid id
    (2**32 + 1 would become 1); the narrower types convert exactly."""
    if topk_ids.dtype == torch.int32:
        return topk_ids
    if topk_ids.dtype == torch.int64:
        topk_ids = topk_ids.clamp(-1, num_stored_experts)
    return topk_ids.to(torch.int32)


def _weight_format(dtype, activation_dtype, weight_scaling,
                   weight_block_size):
    """(activation dtype, weight scaling or None) of a module's dtype
    arguments: fp8 weights (``dtype`` float8_e4m3fn) take their scaling
    from ``weight_block_size`` (128, 128) or ``weight_scaling``, and their
    activations default to bfloat16; MXFP4 weights (float4_e2m1fn_x2) have
    their own and bfloat16 activations; other weights are in the
    activations' dtype and have no scaling."""
    if dtype == _MXFP4:
        if weight_block_size is not None or weight_scaling not in (
                None, layers.MXFP4):
            raise ValueError("MXFP4 weights (dtype=torch.float4_e2m1fn_x2) "
                             "have their own scales, an e8m0 one per 32 "
                             "values: give no weight_block_size, and "
                             "weight_scaling None or 'mxfp4'")
        if activation_dtype not in (None, torch.bfloat16):
            raise TypeError(f"MXFP4 weights run with torch.bfloat16 "
                            f"activations (the kernels decode the weights "
                            f"to bf16), got activation_dtype "
                            f"{activation_dtype}")
        return torch.bfloat16, layers.MXFP4
    if dtype != _FP8:
        if dtype not in _LAYER_DTYPES:
            raise TypeError(f"dtype must be torch.bfloat16, torch.float16, "
                            f"torch.float32, torch.float8_e4m3fn or "
                            f"torch.float4_e2m1fn_x2, got {dtype}")
        if weight_scaling is not None or weight_block_size is not None:
            raise ValueError("weight_scaling and weight_block_size are for "
                             "fp8 weights (dtype=torch.float8_e4m3fn) and "
                             "MXFP4 ones (torch.float4_e2m1fn_x2)")
        if activation_dtype is not None and activation_dtype != dtype:
            raise ValueError(f"activation_dtype ({activation_dtype}) differs "
                             f"from dtype ({dtype}) only with fp8 weights")
        return dtype, None
    if weight_block_size is not None:
        block = layers.SCALE_BLOCK
        if (not isinstance(weight_block_size, (tuple, list))
                or list(weight_block_size) != [block, block]):
            raise ValueError(f"weight_block_size must be ({block}, {block}) "
                             f"(the checkpoints' scale blocks), got "
                             f"{weight_block_size!r}")
        if weight_scaling not in (None, "block"):
            raise ValueError(f"weight_block_size is for block scales, not "
                             f"weight_scaling={weight_scaling!r}")
        weight_scaling = "block"
    if weight_scaling is None:
        raise ValueError("fp8 weights need their scaling: "
                         "weight_block_size=(128, 128) for 128 x 128 block "
                         "scales (DeepSeek-V3, Kimi-K2), or "
                         "weight_scaling='channel' or 'tensor'")
    if weight_scaling not in layers.WEIGHT_SCALINGS:
        raise ValueError(f"unknown weight_scaling {weight_scaling!r} for fp8 "
                         f"weights ({', '.join(layers.WEIGHT_SCALINGS)})")
    if activation_dtype is None:
        activation_dtype = torch.bfloat16
    if activation_dtype not in _LAYER_DTYPES:
        raise TypeError(f"activation_dtype must be torch.bfloat16, "
                        f"torch.float16 or torch.float32, got "
                        f"{activation_dtype}")
    return activation_dtype, weight_scaling


def _quantization(weight_scaling, activation_scheme):
    """The bundle's quantization (layers.QUANTIZATIONS, or None) of weights
    scaled per ``weight_scaling`` (_weight_format's) whose activations are
    scaled per ``activation_scheme``: vLLM's "dynamic" (or None: at run
    time) or "static" (by the module's w13_input_scale and w2_input_scale,
    for fp8 weights with channel or tensor scales only)."""
    if activation_scheme in (None, "dynamic"):
        return weight_scaling
    if activation_scheme != "static":
        raise ValueError(f"activation_scheme must be 'dynamic' or 'static', "
                         f"got {activation_scheme!r}")
    quantization = f"{weight_scaling}-static"
    if quantization not in layers.STATIC_QUANTIZATIONS:
        raise ValueError(
            "activation_scheme='static' is for fp8 weights "
            "(dtype=torch.float8_e4m3fn) with weight_scaling 'channel' or "
            f"'tensor', not {weight_scaling or 'unquantized'} weights: "
            "block-scaled ones quantize their activations per token and 128 "
            "columns at run time, and MXFP4 ones leave them unquantized")
    return quantization


def _make_layer(preset, reduced, layer, sizes, router_args, correction_bias):
    """The moe_mlir.Layer that a module's arguments describe: exactly one
    of a preset name, a Layer, or sizes with router arguments."""
    given_router = {name: value for name, value in router_args.items()
                    if value is not None}
    if preset is not None or layer is not None:
        if preset is not None and layer is not None:
            raise ValueError("give either preset or layer, not both")
        if any(size is not None for size in sizes) or given_router or (
                correction_bias is not None):
            raise ValueError("a preset or layer fixes the sizes and routing; "
                             "give no sizes or router arguments with it")
        if layer is not None:
            if not isinstance(layer, layers.Layer):
                raise TypeError(f"layer must be a moe_mlir.Layer, got "
                                f"{type(layer).__name__}")
            return layer
        return layers.Layer.preset(preset, reduced=reduced)
    num_experts, hidden_size, intermediate_size, top_k = sizes
    if None in sizes:
        raise ValueError("give num_experts, hidden_size, intermediate_size "
                         "and top_k, or a preset, or a layer")
    router = layers.Router(given_router.pop("scoring", "softmax"), top_k,
                           **given_router)
    return layers.Layer(hidden_size, intermediate_size, num_experts, router,
                        False if correction_bias is None else correction_bias)
