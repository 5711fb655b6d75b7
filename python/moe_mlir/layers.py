"""MoE layers described in Python: sizes and routing rules, the model
presets, a layer's MLIR source, and its bundle compiled once into a cache.

A ``Layer`` is plain data, so that a machine without the compiler (the GPU
machine builds moe_mlir with the runtime only) still finds a layer's bundle
in a cache filled elsewhere; making sources and bundles needs the compiler.
"""

import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import shutil
import tempfile

from . import _default_target
from ._errors import Error

# A runtime-only build has no _compiler (see require_compiler); one that
# exists but fails to load raises here, with the loader's reason.
if importlib.util.find_spec(__package__ + "._compiler"):
    from . import _compiler
else:
    _compiler = None

LAYER_DTYPES = ("bf16", "f16", "f32")

#: How fp8 weights may be scaled (moe-compile --quantization, the
#: ``weights`` of ``#moe.quantization``): e4m3 weights with fp32 scales per
#: expert ("tensor"), per output row ("channel") or per SCALE_BLOCK x
#: SCALE_BLOCK block ("block", DeepSeek-V3's ``weight_scale_inv``); the
#: activations are then quantized at run time per token, or for "block" per
#: token and SCALE_BLOCK columns. A quantization of None means weights in
#: the layer's dtype.
WEIGHT_SCALINGS = ("tensor", "channel", "block")
SCALE_BLOCK = 128
#: fp8 weights of "tensor" or "channel" scales whose activations the caller
#: scales statically, one fp32 scale per GEMM input (``#moe.quantization``'s
#: ``static_tensor``; the ``w13_input_scale`` and ``w2_input_scale`` of
#: checkpoints quantized with ``activation_scheme: static``): the weights'
#: scales, then the two input scales of shape INPUT_SCALE_SHAPE, are the
#: last inputs. Block-scaled weights pair with per-token-group activations
#: only.
STATIC_QUANTIZATIONS = ("tensor-static", "channel-static")
INPUT_SCALE_SHAPE = (1,)
#: MXFP4 weights (W4A16, as gpt-oss ships them): e2m1 values packed two per
#: byte along K, the even K index in the low nibble, with an e8m0 scale (a
#: power of two) per MX_BLOCK values of K; the activations stay unquantized
#: (bf16 on the GPU).
MXFP4 = "mxfp4"
MX_BLOCK = 32
#: Every quantization a layer's weights may have (the ``quantization`` of
#: the methods below and of layer_bundle; None: weights in the layer's
#: dtype).
QUANTIZATIONS = WEIGHT_SCALINGS + STATIC_QUANTIZATIONS + (MXFP4,)


def require_compiler(what):
    """Raises Error unless this build of moe_mlir has its compiler part."""
    if _compiler is None:
        raise Error(f"{what} needs moe_mlir's compiler (the _compiler "
                    "extension), which this build lacks: it was built "
                    "without MLIR (MOE_ENABLE_COMPILER=OFF)")
    return _compiler


def _mlir_float(value):
    """`value` as an MLIR float literal, which needs a '.' before any
    exponent (repr gives '1e-05')."""
    text = repr(float(value))
    return text if "." in text.split("e")[0] else f"{value:.17e}"


# The largest size the compiler takes in (its attributes are int64); the
# compiler's verifier bounds each size further.
_INT64_MAX = 2 ** 63 - 1


def _check_count(name, value, least):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not least <= value <= _INT64_MAX:
        raise ValueError(f"{name} must be in [{least}, 2**63 - 1], got "
                         f"{value}")


def _check_quantization(quantization):
    """``quantization`` as the compiler takes it: "" for None, else one of
    QUANTIZATIONS."""
    if quantization is None:
        return ""
    if not isinstance(quantization, str):
        raise TypeError(f"quantization must be a str or None, got "
                        f"{type(quantization).__name__}")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r} "
                         f"({', '.join(QUANTIZATIONS)}, or None for "
                         "weights in the layer's dtype)")
    return quantization


def weight_scaling(quantization):
    """The weights' scaling of ``quantization`` (QUANTIZATIONS, or None):
    "tensor" of "tensor-static", the others as they are."""
    scaling = _check_quantization(quantization)
    return scaling[:-len("-static")] if is_static(scaling) else scaling


def is_static(quantization):
    """Whether ``quantization`` gives the activations static scales
    (STATIC_QUANTIZATIONS)."""
    return quantization in STATIC_QUANTIZATIONS


def _check_bool(name, value):
    # bool("no") is True: a flag must say what it means.
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


@dataclasses.dataclass(frozen=True)
class Router:
    """How a layer routes tokens: the fields of ``#moe.router``.

    ``scoring`` is "softmax" or "sigmoid" of the fp32 logits; ``top_k``
    routed experts per token; experts split into ``num_groups`` groups of
    which the ``topk_groups`` best stay eligible; ``renormalize`` divides
    the chosen weights by their sum; ``routed_scaling_factor`` multiplies
    them; ``num_shared_experts`` fused shared experts follow every token's
    routed ones with weight 1. The checks here are those of the
    compiler's verifier that need no expert count, so that they fail early
    on any machine; the rest fail when the layer is compiled.
    """

    scoring: str
    top_k: int
    num_groups: int = 1
    topk_groups: int = 1
    renormalize: bool = False
    routed_scaling_factor: float = 1.0
    num_shared_experts: int = 0

    def __post_init__(self):
        if self.scoring not in ("softmax", "sigmoid"):
            raise ValueError(f"scoring must be 'softmax' or 'sigmoid', got "
                             f"{self.scoring!r}")
        _check_count("top_k", self.top_k, 1)
        _check_count("num_groups", self.num_groups, 1)
        _check_count("topk_groups", self.topk_groups, 1)
        _check_count("num_shared_experts", self.num_shared_experts, 0)
        if self.topk_groups > self.num_groups:
            raise ValueError(f"topk_groups ({self.topk_groups}) exceeds "
                             f"num_groups ({self.num_groups})")
        _check_bool("renormalize", self.renormalize)
        scale = self.routed_scaling_factor
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f"routed_scaling_factor must be a float, got "
                            f"{type(scale).__name__}")
        try:
            scale = float(scale)
        except OverflowError:  # an int beyond any float
            scale = math.inf
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"routed_scaling_factor must be finite and "
                             f"positive, got {scale}")
        object.__setattr__(self, "routed_scaling_factor", scale)

    @property
    def num_slots(self):
        """Experts per token: routed plus shared."""
        return self.top_k + self.num_shared_experts

    def params(self):
        """The ``#moe.router<...>`` parameters, e.g. "scoring = softmax,
        top_k = 2, ..." (every field written out)."""
        return (f"scoring = {self.scoring}, top_k = {self.top_k}, "
                f"num_groups = {self.num_groups}, "
                f"topk_groups = {self.topk_groups}, "
                f"renormalize = {str(self.renormalize).lower()}, "
                f"routed_scaling_factor = "
                f"{_mlir_float(self.routed_scaling_factor)}, "
                f"num_shared_experts = {self.num_shared_experts}")


@dataclasses.dataclass(frozen=True)
class Layer:
    """One MoE layer's sizes and routing (DESIGN.md's names: H hidden, I
    intermediate, E routed experts, X shared experts).

    Its operands: hidden states [T, H], router logits [T, E] (fp32), w13
    [E+X, 2I, H] (gate rows, then up rows), w2 [E+X, H, I], and with
    ``correction_bias`` a bias [E] (fp32) added to the scores for selection
    only; with ``expert_biases`` the experts' biases w13_bias [E+X, 2I] and
    w2_bias [E+X, H] (in the layer's dtype) after those; with quantized
    weights (a ``quantization`` of QUANTIZATIONS where a method takes one)
    w13 and w2 are e4m3 with fp32 scales (WEIGHT_SCALINGS), or packed MXFP4
    codes (w13_stored_shape, w2_stored_shape) with e8m0 scales, and the
    scales (w13_scales_shape, w2_scales_shape) follow, last; with static
    activation scales (STATIC_QUANTIZATIONS) then the two GEMM inputs'
    scales, INPUT_SCALE_SHAPE fp32 each. The activation is SiLU-and-mul,
    or with ``swiglu`` (alpha, limit) gpt-oss's clamped SwiGLU
    (#moe.swiglu).
    """

    hidden_size: int
    intermediate_size: int
    num_experts: int
    router: Router
    correction_bias: bool = False
    swiglu: tuple = None
    expert_biases: bool = False

    def __post_init__(self):
        _check_count("hidden_size", self.hidden_size, 1)
        _check_count("intermediate_size", self.intermediate_size, 1)
        _check_count("num_experts", self.num_experts, 1)
        if not isinstance(self.router, Router):
            raise TypeError(f"router must be a moe_mlir.Router, got "
                            f"{type(self.router).__name__}")
        _check_bool("correction_bias", self.correction_bias)
        _check_bool("expert_biases", self.expert_biases)
        if self.swiglu is not None:
            alpha, limit = (float(value) for value in self.swiglu)
            if not (math.isfinite(alpha) and math.isfinite(limit)
                    and limit > 0):
                raise ValueError(f"swiglu must be (alpha, limit) with a "
                                 f"finite alpha and a finite positive "
                                 f"limit, got {self.swiglu}")
            object.__setattr__(self, "swiglu", (alpha, limit))

    @classmethod
    def preset(cls, name, reduced=False):
        """The layer of a model preset (preset_names()); ``reduced`` divides
        the hidden and intermediate sizes by 32, routing unchanged, as the
        tools' --reduced does."""
        for entry in require_compiler("Layer.preset").preset_table():
            if entry["name"] == name:
                layer = cls(entry["hidden_size"], entry["intermediate_size"],
                            entry["num_experts"], Router(**entry["router"]),
                            entry["correction_bias"], entry["swiglu"],
                            entry["expert_biases"])
                return layer.shrunk(32) if reduced else layer
        raise ValueError(f"unknown preset {name!r} "
                         f"({', '.join(preset_names())})")

    def shrunk(self, factor):
        """This layer with hidden and intermediate sizes divided by
        ``factor`` (rounding down), routing unchanged."""
        return dataclasses.replace(
            self, hidden_size=self.hidden_size // factor,
            intermediate_size=self.intermediate_size // factor)

    def tensor_parallel(self, world_size, quantization=None):
        """The layer each of ``world_size`` tensor-parallel ranks computes:
        this one with every expert's (routed and shared) intermediate size
        I divided by ``world_size``, routing unchanged. A rank holds its
        rows of w13 and columns of w2 of every expert (shard_slices) and
        routes every token itself from the same logits; the ranks' outputs
        sum to this layer's, since SiLU-and-mul acts per intermediate
        column and the down projection sums over them. With fp8 weights of
        "tensor" or "channel" scales (``quantization``) a rank quantizes
        its own intermediate columns per token, a finer scale than the one
        over all I of the single-device layer.

        Raises ValueError when I is not divisible by ``world_size``, or when
        with "block" scales and more than one rank I / world_size is not a
        multiple of SCALE_BLOCK: a scale block of a shard would then hold
        rows of two blocks of the full weights, one scale for two, and an
        activation group of SCALE_BLOCK columns would straddle two ranks;
        likewise for MXFP4 weights when I / world_size is not a multiple of
        MX_BLOCK (w2's scale blocks run along I).

        Raises NotImplementedError for expert biases on more than one rank:
        each rank would add w2's bias to the sum.
        """
        _check_count("world_size", world_size, 1)
        scaling = _check_quantization(quantization)
        if self.expert_biases and world_size > 1:
            raise NotImplementedError(
                "tensor parallel with expert biases: every rank would add "
                "w2_bias to the reduced output")
        intermediate = self.intermediate_size
        if intermediate % world_size:
            raise ValueError(f"intermediate_size {intermediate} is not "
                             f"divisible by {world_size} tensor-parallel "
                             "ranks")
        shard = intermediate // world_size
        block = {"block": (SCALE_BLOCK, f"{SCALE_BLOCK} x {SCALE_BLOCK} "
                           "scale blocks"),
                 MXFP4: (MX_BLOCK, f"mxfp4 blocks of {MX_BLOCK} values")
                 }.get(scaling)
        if block and world_size > 1 and shard % block[0]:
            raise ValueError(
                f"{world_size} tensor-parallel ranks would hold "
                f"intermediate_size {intermediate} / {world_size} = {shard} "
                f"each, not a multiple of the {block[1]}: a block astride "
                "two ranks would need one scale for both")
        return dataclasses.replace(self, intermediate_size=shard)

    def shard_slices(self, world_size, rank, quantization=None):
        """Where rank ``rank`` of ``world_size`` tensor-parallel ranks takes
        its shard of each weight (the weights of tensor_parallel(world_size,
        quantization)) from this layer's full-size ones: {name: [(shard
        index, full index), ...]} for "w13" and "w2" and, with a
        ``quantization``, "w13_scales" and "w2_scales"; shard[shard index] =
        full[full index] for every pair fills the shard. The indices are
        tuples of slices, which numpy arrays and torch tensors both take.

        With i = I / world_size and r = rank, w13's rows are the rank's gate
        rows [r*i, (r+1)*i), then its up rows [I + r*i, I + (r+1)*i), and
        w2's columns [r*i, (r+1)*i) (packed MXFP4: its bytes [r*i/2,
        (r+1)*i/2)). Block scales follow the blocks of those rows and
        columns, w13's channel and MXFP4 scales its rows, w2's MXFP4 scales
        its blocks of columns; w2's channel scales and per-tensor scales (H
        is not split) are whole, as is every weight with one rank (and a
        static quantization's input scales, one per GEMM input, which
        every rank holds).
        """
        shard = self.tensor_parallel(world_size, quantization)
        scaling = weight_scaling(quantization)
        _check_count("rank", rank, 0)
        if rank >= world_size:
            raise ValueError(f"rank {rank} is not one of {world_size} "
                             "tensor-parallel ranks")
        whole = [((Ellipsis,), (Ellipsis,))]
        names = ["w13", "w2"] + (["w13_scales", "w2_scales"] if scaling
                                 else [])
        if world_size == 1:
            return {name: whole for name in names}

        def split(unit, halves, trailing):
            """The rank's part of each of ``halves`` consecutive ranges of
            I / ``unit`` indices of a dimension that ``trailing``
            dimensions follow."""
            part = shard.intermediate_size // unit
            full = self.intermediate_size // unit
            rest = (slice(None),) * trailing
            return [((Ellipsis, slice(half * part, (half + 1) * part))
                     + rest,
                     (Ellipsis, slice(half * full + rank * part,
                                      half * full + (rank + 1) * part))
                     + rest)
                    for half in range(halves)]

        slices = {"w13": split(1, 2, 1),
                  "w2": split(2 if scaling == MXFP4 else 1, 1, 0)}
        if scaling == MXFP4:
            slices.update(w13_scales=split(1, 2, 1),
                          w2_scales=split(MX_BLOCK, 1, 0))
        elif scaling == "block":
            slices.update(w13_scales=split(SCALE_BLOCK, 2, 1),
                          w2_scales=split(SCALE_BLOCK, 1, 0))
        elif scaling == "channel":
            slices.update(w13_scales=split(1, 2, 0), w2_scales=whole)
        elif scaling == "tensor":
            slices.update(w13_scales=whole, w2_scales=whole)
        return slices

    def expert_shard(self, world_size):
        """The layer whose weights each of ``world_size`` expert-parallel
        ranks holds: this one with E / world_size routed experts, the
        shared ones and every size and rule unchanged, so that its w13, w2,
        expert biases and scales have a rank's shapes, [E/world_size + X,
        ...] (expert_slices says which experts). It is not what a rank
        computes: a rank routes its tokens over all E experts and exchanges
        them with the others (expert_parallel_source).

        Raises ValueError unless ``world_size`` divides E.
        """
        _check_count("world_size", world_size, 1)
        if self.num_experts % world_size:
            raise ValueError(f"num_experts {self.num_experts} is not "
                             f"divisible by {world_size} expert-parallel "
                             "ranks")
        return dataclasses.replace(
            self, num_experts=self.num_experts // world_size)

    def expert_slices(self, world_size, rank, quantization=None):
        """Where rank ``rank`` of ``world_size`` expert-parallel ranks takes
        its experts' weights (those of expert_shard(world_size)) from this
        layer's full-size ones, in shard_slices' form: {name: [(rank's
        index, full index), ...]} for "w13", "w2", with expert biases
        "w13_bias" and "w2_bias", and with a ``quantization`` "w13_scales"
        and "w2_scales", each indexed by expert first. With e = E /
        world_size and r = rank, the rank holds the routed experts [r*e,
        (r+1)*e) at its indices [0, e), then the X shared experts [E, E+X)
        (every rank a replica); the correction bias and a static
        quantization's input scales are whole.
        """
        shard = self.expert_shard(world_size)
        _check_count("rank", rank, 0)
        if rank >= world_size:
            raise ValueError(f"rank {rank} is not one of {world_size} "
                             "expert-parallel ranks")
        routed, shared = shard.num_experts, self.router.num_shared_experts
        pieces = [((slice(0, routed),),
                   (slice(rank * routed, (rank + 1) * routed),))]
        if shared:
            pieces.append(((slice(routed, routed + shared),),
                           (slice(self.num_experts,
                                  self.num_stored_experts),)))
        names = (["w13", "w2"]
                 + (["w13_bias", "w2_bias"] if self.expert_biases else [])
                 + (["w13_scales", "w2_scales"]
                    if weight_scaling(quantization) else []))
        return {name: list(pieces) for name in names}

    @property
    def num_stored_experts(self):
        """E + X: the experts whose weights w13 and w2 hold."""
        return self.num_experts + self.router.num_shared_experts

    @property
    def w13_shape(self):
        return (self.num_stored_experts, 2 * self.intermediate_size,
                self.hidden_size)

    @property
    def w2_shape(self):
        return (self.num_stored_experts, self.hidden_size,
                self.intermediate_size)

    def w13_stored_shape(self, quantization=None):
        """The shape w13 is stored in with ``quantization``: w13_shape, or
        for MXFP4's two codes a byte [E+X, 2I, H/2]."""
        return self._stored_shape(quantization, self.w13_shape)

    def w2_stored_shape(self, quantization=None):
        """The shape w2 is stored in (see w13_stored_shape): w2_shape, or
        [E+X, H, I/2] for MXFP4."""
        return self._stored_shape(quantization, self.w2_shape)

    @staticmethod
    def _stored_shape(quantization, shape):
        if _check_quantization(quantization) != MXFP4:
            return shape
        return (*shape[:2], shape[2] // 2)

    def w13_scales_shape(self, quantization):
        """The shape of w13's scales when its weights are quantized per
        ``quantization`` (QUANTIZATIONS): fp32 [E+X], [E+X, 2I] or
        [E+X, ceil(2I/128), ceil(H/128)] for fp8, e8m0 [E+X, 2I,
        ceil(H/32)] for MXFP4."""
        return self._scales_shape(quantization, *self.w13_shape[1:])

    def w2_scales_shape(self, quantization):
        """The shape of w2's scales (see w13_scales_shape): [E+X],
        [E+X, H] or [E+X, ceil(H/128), ceil(I/128)] for fp8, [E+X, H,
        ceil(I/32)] for MXFP4."""
        return self._scales_shape(quantization, *self.w2_shape[1:])

    def _scales_shape(self, quantization, rows, columns):
        """QuantizationAttr::getWeightScalesShape of [E+X, rows, columns]."""
        scaling = weight_scaling(quantization)
        if not scaling:
            raise ValueError("weights in the layer's dtype have no scales; "
                             "give a quantization "
                             f"({', '.join(QUANTIZATIONS)})")
        experts = self.num_stored_experts
        if scaling == "tensor":
            return (experts,)
        if scaling == "channel":
            return (experts, rows)
        if scaling == MXFP4:
            return (experts, rows, -(-columns // MX_BLOCK))
        return (experts, -(-rows // SCALE_BLOCK), -(-columns // SCALE_BLOCK))

    @property
    def w13_bias_shape(self):
        return (self.num_stored_experts, 2 * self.intermediate_size)

    @property
    def w2_bias_shape(self):
        return (self.num_stored_experts, self.hidden_size)

    def source(self, dtype="bf16", quantization=None):
        """The layer as MLIR: ``func.func @layer(%x, %logits, %w13, %w2[,
        %bias][, %w13_bias, %w2_bias][, %w13_scales, %w2_scales][,
        %w13_input_scale, %w2_input_scale])`` of one moe.fused_moe,
        activations in ``dtype`` (bf16, f16, f32), weights too or with a
        ``quantization`` (QUANTIZATIONS) e4m3 with their fp32 scales (and
        for STATIC_QUANTIZATIONS the inputs' static scales, tensor<1xf32>
        each) or packed MXFP4 (i8) with their e8m0 scales, logits and bias
        in f32, T dynamic."""
        return self._part_source("layer", dtype, quantization=quantization)

    def expert_parallel_source(self, world, rank, tokens, dtype="bf16",
                               quantization=None):
        """Rank ``rank`` of the layer split over ``world`` ranks by its
        routed experts, at ``tokens`` tokens a rank, as MLIR: source()'s
        function with T = ``tokens``, the weights (and their scales and
        biases) of the rank's E/world routed experts then every shared
        expert, and ``expert_parallel = #moe.expert_parallel<world, rank>``
        on its moe.fused_moe (docs/MULTI-GPU.md). moe-compile --phase
        compiles each of its phases."""
        return self._part_source("layer", dtype, quantization=quantization,
                                 parallel=(world, rank, tokens))

    def experts_source(self, dtype="bf16", quantization=None):
        """The layer's experts given their routing, as MLIR: ``func.func
        @experts(%x [T, H], %ids [T, S] i32, %weights [T, S] f32, %w13,
        %w2[, %w13_bias, %w2_bias][, %w13_scales, %w2_scales][,
        %w13_input_scale, %w2_input_scale])`` of one moe.fused_experts (S =
        top_k + shared experts, the weights of all E+X experts; ids outside
        [0, E+X) contribute nothing), as moe-compile --part experts;
        ``dtype`` and ``quantization`` as for source."""
        return self._part_source("experts", dtype, quantization=quantization)

    def routing_source(self, dtype="bf16", block_m=64):
        """The layer's routing as MLIR: moe.gate, moe.route (``block_m``
        rows per block) and moe.combine, as moe-compile --part routing."""
        return self._part_source("routing", dtype, block_m)

    def router_source(self):
        """The layer's router as MLIR: one moe.gate."""
        return self._part_source("router", "f32")

    def _part_source(self, part, dtype, block_m=64, quantization=None,
                     parallel=(0, 0, 0)):
        quantization = _check_quantization(quantization)
        world, rank, tokens = parallel
        compiler = require_compiler("Layer." + ("source" if part == "layer"
                                                else part + "_source"))
        return compiler.layer_part_source(
            part, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_experts=self.num_experts, top_k=self.router.top_k,
            num_shared_experts=self.router.num_shared_experts,
            router=self.router.params(),
            correction_bias=self.correction_bias, dtype=dtype,
            block_m=block_m, quantization=quantization,
            swiglu=(f"alpha = {_mlir_float(self.swiglu[0])}, limit = "
                    f"{_mlir_float(self.swiglu[1])}" if self.swiglu else ""),
            expert_biases=self.expert_biases, world=world, rank=rank,
            tokens=tokens)


def preset_names():
    """The names of the model presets (mixtral-8x7b, ...)."""
    return [entry["name"]
            for entry in require_compiler("preset_names").preset_table()]


def default_cache_dir():
    """Where layer_bundle keeps bundles unless told: a directory of this
    user's in the system's temporary directory."""
    return os.path.join(tempfile.gettempdir(), f"moe_mlir-{os.getuid()}")


# The default target (include/moe/Target/DefaultTarget.h): the CUDA device
# name tuned configs are looked up for, its multiprocessors, the chip and the
# CUDA toolkit.
DEFAULT_DEVICE_NAME = _default_target.DEVICE_NAME
DEFAULT_NUM_SMS = _default_target.NUM_SMS
DEFAULT_CHIP = _default_target.CHIP
DEFAULT_CUDA_TOOLKIT = _default_target.CUDA_TOOLKIT


#: What layer_bundle compiles of a layer: the whole layer from router
#: logits, or its experts given routing (Layer.source, Layer.experts_source).
BUNDLE_PARTS = ("layer", "experts")


def layer_bundle(layer, dtype="bf16", *, quantization=None, part="layer",
                 cache_dir=None,
                 tokens_max=16384, block_m=0, config_db=None,
                 device_name=DEFAULT_DEVICE_NAME, num_sms=DEFAULT_NUM_SMS,
                 chip=DEFAULT_CHIP, toolkit=DEFAULT_CUDA_TOOLKIT,
                 token_buckets=(), expert_parallel=None, phase=None):
    """The path of ``layer``'s bundle for ``dtype``, compiled on first use.

    ``part`` "layer" compiles the whole layer (Layer.source: hidden states,
    router logits, w13, w2[, bias] -> output); "experts" its experts given
    routing (Layer.experts_source: hidden states, ids, weights, w13, w2 ->
    output). With a ``quantization`` (QUANTIZATIONS) the weights are fp8
    or MXFP4 and their scales follow as the last inputs; ``dtype`` is then
    the hidden states' (bf16 for MXFP4 on the GPU).

    The bundle serves every token count up to ``tokens_max`` with a variant
    per range of token counts, each with the routing blocks, tiles and K
    splits chosen for its token counts (compile_bundle's ``token_buckets``;
    the default finds where the choices change, so every token count runs
    the kernels a bundle for it alone would). Rows per routing block:
    ``block_m``, or with 0 chosen for each variant's token counts (128 once
    the experts average 64 rows, else 64). The grouped matmuls
    take their tile configs from the tuned database
    ``config_db`` (a file moe-tune wrote) and then the shipped one, looked
    up for the CUDA device ``device_name`` near ``tokens_max`` tokens; a
    shape with no entry gets the heuristic and a UserWarning. K splits and
    persistent grids fill ``num_sms`` multiprocessors.

    Bundles live in ``cache_dir`` (default_cache_dir() when None) under a
    name derived from the layer, part, dtype, quantization, tokens_max,
    block_m, the config database's contents, device_name, num_sms, chip,
    token_buckets and the bundle format, so a cache filled on a machine
    with the compiler serves one without it. The key does not cover the
    compiler's own version: give a fresh cache_dir (or empty it) after
    changing the compiler. A bundle appears atomically (compiled beside it,
    then renamed), so concurrent processes never load a partial one. Beside
    the runtime's files it holds layer.mlir (the source) and layer.json
    (the key).

    ``expert_parallel`` = (world, rank) compiles ``phase`` (dispatch,
    experts or combine) of rank ``rank`` of the layer split over ``world``
    ranks by its routed experts, at ``tokens_max`` tokens a rank
    (Layer.expert_parallel_source; moe_mlir.expert_parallel runs them);
    ``part`` must then be "layer".

    Raises moe_mlir.Error when the layer cannot be compiled (the message
    has the compiler's diagnostics) or when no compiler is there to make a
    missing bundle.
    """
    if dtype not in LAYER_DTYPES:
        raise ValueError(f"unknown layer dtype {dtype!r} "
                         f"({', '.join(LAYER_DTYPES)})")
    if part not in BUNDLE_PARTS:
        raise ValueError(f"unknown bundle part {part!r} "
                         f"({', '.join(BUNDLE_PARTS)})")
    scaling = _check_quantization(quantization)
    if (expert_parallel is None) != (phase is None) or (
            expert_parallel is not None and part != "layer"):
        raise ValueError("expert_parallel=(world, rank) and a phase go "
                         "together, with part 'layer'")
    database = None
    if config_db is not None:
        with open(config_db, "rb") as file:
            database = hashlib.sha256(file.read()).hexdigest()
    key = {"layer": dataclasses.asdict(layer), "part": part, "dtype": dtype,
           "quantization": quantization, "tokens_max": tokens_max,
           "block_m": block_m, "chip": chip,
           "config_db": database, "device_name": device_name,
           "num_sms": num_sms, "token_buckets": list(token_buckets),
           "bundle_format": 3}
    if expert_parallel is not None:
        key.update(expert_parallel=list(expert_parallel), phase=phase)
        part = f"ep{expert_parallel[0]}r{expert_parallel[1]}-{phase}"
    key_text = json.dumps(key, sort_keys=True, indent=1)
    digest = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    weights, described = (
        ("", "") if not scaling else ("-mxfp4", ", mxfp4 weights")
        if scaling == MXFP4 else (f"-fp8{scaling}", f", fp8 {scaling} scales"))
    name = (f"{part}-e{layer.num_stored_experts}-h{layer.hidden_size}-"
            f"i{layer.intermediate_size}-{dtype}{weights}-{digest}.moeb")
    # The default directory is this user's alone; a given one is the
    # caller's to share.
    private = cache_dir is None
    cache_dir = default_cache_dir() if private else os.fspath(cache_dir)
    path = os.path.join(cache_dir, name)
    if os.path.isfile(os.path.join(path, "manifest.txt")):
        return path

    compiler = require_compiler(f"compiling {name} (not in {cache_dir})")
    os.makedirs(cache_dir, mode=0o700 if private else 0o777, exist_ok=True)
    if expert_parallel is not None:
        source = layer.expert_parallel_source(*expert_parallel, tokens_max,
                                              dtype, quantization)
    elif part == "experts":
        source = layer.experts_source(dtype, quantization)
    else:
        source = layer.source(dtype, quantization)
    staging = tempfile.mkdtemp(prefix=name + ".", dir=cache_dir)
    try:
        try:
            compiler.compile_bundle(source, staging, tokens_max=tokens_max,
                                    block_m=block_m,
                                    config_db=os.fspath(config_db or ""),
                                    device=device_name, num_sms=num_sms,
                                    chip=chip, toolkit=toolkit,
                                    token_buckets=list(token_buckets),
                                    phase=phase or "")
        except Error as error:
            raise Error(f"cannot compile the layer (E={layer.num_experts}+"
                        f"{layer.router.num_shared_experts}, "
                        f"H={layer.hidden_size}, "
                        f"I={layer.intermediate_size}, {dtype}"
                        f"{described}) to a "
                        f"bundle: {error}") from error
        with open(os.path.join(staging, "layer.mlir"), "w") as file:
            file.write(source)
        with open(os.path.join(staging, "layer.json"), "w") as file:
            file.write(key_text + "\n")
        os.chmod(staging, 0o755)  # mkdtemp's 0700 would hide it from others
        try:
            os.rename(staging, path)
        except OSError:
            # Another process finished the same bundle first.
            if not os.path.isfile(os.path.join(path, "manifest.txt")):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path
