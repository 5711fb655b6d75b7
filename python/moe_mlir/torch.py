"""torch glue: FusedMoE, an nn.Module that runs one MoE layer's bundle on
CUDA tensors, and empty_outputs for running any bundle on torch tensors.

Importing this module imports torch; the rest of moe_mlir does not.
"""

import math

import torch

from . import layers
from ._errors import Error
from .runtime import Bundle

__all__ = ["FusedMoE", "TORCH_DTYPES", "empty_outputs"]

#: torch's dtype of each bundle element type.
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16,
                "f16": torch.float16, "i32": torch.int32,
                "i64": torch.int64, "u8": torch.uint8}
_LAYER_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16",
                 torch.float32: "f32"}
# The runtime's alignment of every tensor's address.
_ALIGNMENT = 16


def empty_outputs(bundle, tokens):
    """Uninitialised torch tensors for the outputs of ``bundle`` (a
    moe_mlir.Bundle) at ``tokens`` tokens, on its device, in order."""
    return [torch.empty(info.shape, dtype=TORCH_DTYPES[info.dtype],
                        device=f"cuda:{bundle.device}")
            for info in bundle.tensors(tokens) if info.role == "output"]


class FusedMoE(torch.nn.Module):
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
    them with load_state_dict or copy_ into them.

    The bundle is compiled at construction (moe_mlir.layer_bundle, cached in
    ``cache_dir``; a machine without the compiler needs it there already)
    for up to ``tokens_max`` tokens, with the grouped matmuls' tile configs
    from ``config_db`` (a moe-tune database) and the shipped database for
    the CUDA device named ``device_name``, with K splits and persistent
    grids sized for ``num_sms`` multiprocessors (defaults: the name and the
    multiprocessor count of ``device``, or of the current CUDA device), and
    loaded onto a device at the first
    forward there. forward allocates only its output, through torch, and
    enqueues the layer on torch's current stream without synchronising, so
    it can be captured in a CUDA graph once it has run on that device.
    """

    def __init__(self, num_experts=None, hidden_size=None,
                 intermediate_size=None, top_k=None, *, scoring=None,
                 num_groups=None, topk_groups=None, renormalize=None,
                 routed_scaling_factor=None, num_shared_experts=None,
                 correction_bias=None, preset=None, reduced=False, layer=None,
                 dtype=torch.bfloat16, device=None, tokens_max=16384,
                 block_m=0, cache_dir=None, config_db=None,
                 device_name=None, num_sms=None, chip=layers.DEFAULT_CHIP,
                 toolkit=layers.DEFAULT_CUDA_TOOLKIT):
        super().__init__()
        self.layer = _make_layer(
            preset, reduced, layer,
            sizes=(num_experts, hidden_size, intermediate_size, top_k),
            router_args={"scoring": scoring, "num_groups": num_groups,
                         "topk_groups": topk_groups,
                         "renormalize": renormalize,
                         "routed_scaling_factor": routed_scaling_factor,
                         "num_shared_experts": num_shared_experts},
            correction_bias=correction_bias)
        if dtype not in _LAYER_DTYPES:
            raise TypeError(f"dtype must be torch.bfloat16, torch.float16 or "
                            f"torch.float32, got {dtype}")
        self.dtype = dtype
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
        try:
            self.bundle_path = layers.layer_bundle(
                self.layer, _LAYER_DTYPES[dtype], cache_dir=cache_dir,
                tokens_max=tokens_max, block_m=block_m, config_db=config_db,
                device_name=device_name, num_sms=num_sms, chip=chip,
                toolkit=toolkit)
        except Error as error:
            raise Error(f"FusedMoE has no GPU bundle for its layer: "
                        f"{error}") from error
        # Loaded per device at the first forward there.
        self._bundles = {}

        self.w13 = torch.nn.Parameter(
            torch.empty(self.layer.w13_shape, dtype=dtype, device=device),
            requires_grad=False)
        self.w2 = torch.nn.Parameter(
            torch.empty(self.layer.w2_shape, dtype=dtype, device=device),
            requires_grad=False)
        if self.layer.correction_bias:
            self.correction_bias = torch.nn.Parameter(
                torch.empty(self.layer.num_experts, dtype=torch.float32,
                            device=device),
                requires_grad=False)
        else:
            self.register_parameter("correction_bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Weights uniform in +-1/sqrt(fan-in), as nn.Linear's; bias 0."""
        with torch.no_grad():
            bound = 1 / math.sqrt(self.layer.hidden_size)
            self.w13.uniform_(-bound, bound)
            bound = 1 / math.sqrt(self.layer.intermediate_size)
            self.w2.uniform_(-bound, bound)
            if self.correction_bias is not None:
                self.correction_bias.zero_()

    def forward(self, hidden_states, router_logits):
        """The layer's output [T, H] in the layer's dtype.

        ``hidden_states`` [T, H] in the layer's dtype and ``router_logits``
        [T, E] (any float dtype; routing computes in float32, so they are
        converted) on the parameters' CUDA device. Wrong types raise
        TypeError, wrong shapes or devices ValueError.
        """
        hidden_size = self.layer.hidden_size
        num_experts = self.layer.num_experts
        for name, tensor in (("hidden_states", hidden_states),
                             ("router_logits", router_logits)):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got "
                                f"{type(tensor).__name__}")
        if hidden_states.dim() != 2 or hidden_states.shape[1] != hidden_size:
            raise ValueError(f"hidden_states must have shape [T, "
                             f"{hidden_size}], got "
                             f"{list(hidden_states.shape)}")
        tokens = hidden_states.shape[0]
        if router_logits.shape != (tokens, num_experts):
            raise ValueError(f"router_logits must have shape [{tokens}, "
                             f"{num_experts}] (T from hidden_states), got "
                             f"{list(router_logits.shape)}")
        if hidden_states.dtype != self.dtype:
            raise TypeError(f"hidden_states must be {self.dtype} (the "
                            f"layer's dtype), got {hidden_states.dtype}")
        if not router_logits.is_floating_point():
            raise TypeError(f"router_logits must be floating-point, got "
                            f"{router_logits.dtype}")
        device = hidden_states.device
        if device.type != "cuda":
            raise ValueError(f"hidden_states must be on a CUDA device, got "
                             f"{device}")
        if router_logits.device != device:
            raise ValueError(f"router_logits are on {router_logits.device}, "
                             f"hidden_states on {device}")
        weights = self._checked_weights(device)
        if tokens > self.tokens_max:
            raise ValueError(f"{tokens} tokens exceed the bundle's "
                             f"tokens_max ({self.tokens_max}); construct "
                             "FusedMoE with a larger tokens_max")
        if tokens == 0:
            return hidden_states.new_empty((0, hidden_size))

        bundle = self._bundle(device)
        inputs = [_aligned(hidden_states.contiguous()),
                  _aligned(router_logits.to(torch.float32).contiguous())]
        output = torch.empty((tokens, hidden_size), dtype=self.dtype,
                             device=device)
        bundle.run(tokens, inputs + weights + [output],
                   torch.cuda.current_stream(device).cuda_stream)
        return output

    def __getstate__(self):
        """Copies and pickles leave the loaded bundles behind: device
        state cannot be copied, and each copy loads its own."""
        state = self.__dict__.copy()
        state["_bundles"] = {}
        return state

    def extra_repr(self):
        layer, router = self.layer, self.layer.router
        return (f"num_experts={layer.num_experts}+"
                f"{router.num_shared_experts}, "
                f"hidden_size={layer.hidden_size}, "
                f"intermediate_size={layer.intermediate_size}, "
                f"router=<{router.params()}>, "
                f"correction_bias={layer.correction_bias}, dtype={self.dtype}")

    def _checked_weights(self, device):
        """The parameters in the bundle's order, checked for the dtype,
        device and layout the bundle needs."""
        weights = [("w13", self.w13, self.dtype), ("w2", self.w2, self.dtype)]
        if self.correction_bias is not None:
            weights.append(("correction_bias", self.correction_bias,
                            torch.float32))
        for name, weight, dtype in weights:
            if weight.dtype != dtype:
                raise TypeError(f"{name} is {weight.dtype}, but the bundle "
                                f"was compiled for {dtype} (module.to(dtype) "
                                "converts every parameter; construct "
                                "FusedMoE with the dtype instead)")
            if weight.device != device:
                raise ValueError(f"{name} is on {weight.device} and "
                                 f"hidden_states on {device}; move the "
                                 "module with .to(device)")
            if (not weight.is_contiguous()
                    or weight.data_ptr() % _ALIGNMENT):
                raise ValueError(f"{name} must be contiguous and "
                                 f"{_ALIGNMENT}-byte aligned")
        return [weight for _, weight, _ in weights]

    def _bundle(self, device):
        """The bundle loaded onto `device`, loading it on the first call."""
        index = device.index if device.index is not None else (
            torch.cuda.current_device())
        bundle = self._bundles.get(index)
        if bundle is not None:
            return bundle
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                f"FusedMoE loads its bundle onto cuda:{index} at the first "
                "forward there, which allocates device memory and so cannot "
                "happen during CUDA-graph capture: run forward once before "
                "capturing")
        bundle = Bundle(self.bundle_path, index)
        self._check_bundle(bundle)
        self._bundles[index] = bundle
        return bundle

    def _check_bundle(self, bundle):
        """Raises Error unless `bundle` takes this layer's tensors (guards
        against a cache entry from another compiler or a damaged one)."""
        layer = self.layer
        dtype = _LAYER_DTYPES[self.dtype]
        expected = [("input", dtype, (1, layer.hidden_size)),
                    ("input", "f32", (1, layer.num_experts)),
                    ("input", dtype, layer.w13_shape),
                    ("input", dtype, layer.w2_shape)]
        if layer.correction_bias:
            expected.append(("input", "f32", (layer.num_experts,)))
        expected.append(("output", dtype, (1, layer.hidden_size)))
        actual = [(info.role, info.dtype, tuple(info.shape))
                  for info in bundle.tensors(1)]
        if actual != expected:
            raise Error(f"bundle {bundle.path} does not take this layer's "
                        f"tensors (expected {expected}, it takes {actual}); "
                        "delete it to have it compiled again")


def _make_layer(preset, reduced, layer, sizes, router_args, correction_bias):
    """The moe_mlir.Layer that FusedMoE's arguments describe: exactly one of
    a preset name, a Layer, or sizes with router arguments."""
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
                        bool(correction_bias))


def _aligned(tensor):
    """`tensor`, copied if its address is not as aligned as the runtime
    needs (a view into the middle of a larger tensor can start anywhere)."""
    return tensor.clone() if tensor.data_ptr() % _ALIGNMENT else tensor
