"""The torch half of moe_mlir.transformers: the "moe_mlir" experts
implementation (run_experts) and FusedMoEBlock (fused_moe_block).
moe_mlir.transformers imports it when a model first needs it; the names
(gate_up_proj, is_transposed, ...) are those of transformers 5.x's experts
modules and the use_experts_implementation decorator."""

import ast
import collections
import dataclasses
import inspect
import textwrap

import torch
import torch.nn.functional as F

from .layers import Layer, Router
from .torch import FusedExperts, FusedMoE, _readable_in_place, gpt_oss_weights

_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# An experts module keeps its FusedExperts in its __dict__, not as a
# submodule, so that the model's state_dict, parameters() and .to() stay
# what transformers made them.
_CACHE_ATTR = "_moe_mlir_experts"


def _is_silu(act):
    """Whether `act` computes SiLU (transformers' ACT2FN["silu"], nn.SiLU,
    F.silu, ...), by its values."""
    if not callable(act):
        return False
    probe = torch.linspace(-6.0, 6.0, 25)
    with torch.no_grad():
        values = act(probe)
    return (isinstance(values, torch.Tensor)
            and torch.allclose(values, F.silu(probe), rtol=1e-6, atol=1e-6))


def _default_apply_gate():
    """transformers' own gate (split, act(gate) * up), or None where the
    version has no such function."""
    from transformers.integrations import moe
    return getattr(moe, "_default_apply_gate", None)


def _clamped_swiglu(module):
    """(alpha, limit) of gpt-oss's clamped SwiGLU when experts module
    `module`'s _apply_gate computes it on interleaved gate and up columns
    (transformers' GptOssExperts), by its values on both sides of both
    clamps; else None."""
    alpha, limit = (getattr(module, name, None) for name in ("alpha", "limit"))
    gate = getattr(module, "_apply_gate", None)
    if not (isinstance(alpha, (int, float)) and isinstance(limit, (int, float))
            and limit > 0 and callable(gate)):
        return None
    probe = torch.linspace(-2.0 * limit, 2.0 * limit, 64).view(4, 16)
    gate_columns, up_columns = probe[:, 0::2], probe[:, 1::2]
    clamped = gate_columns.clamp(max=limit)
    expected = ((up_columns.clamp(-limit, limit) + 1) * clamped
                * torch.sigmoid(alpha * clamped))
    with torch.no_grad():
        values = gate(probe)
    if not (isinstance(values, torch.Tensor)
            and values.shape == expected.shape
            and torch.allclose(values, expected, rtol=1e-5, atol=1e-6)):
        return None
    return float(alpha), float(limit)


# What run_experts and fused_moe_block read an experts module as: its
# sizes, whether its weights are transposed, and gpt-oss's clamped SwiGLU
# (alpha, limit) for its experts with biases and interleaved gate and up
# (None for SiLU-and-mul experts without biases).
_Layout = collections.namedtuple(
    "_Layout", "experts hidden intermediate transposed swiglu")


def _is_gpt_oss(module):
    """gpt-oss's experts' (alpha, limit) when `module` is of their kind:
    biases, gate and up interleaved, the clamped SwiGLU; else None."""
    if not (getattr(module, "has_bias", False)
            and getattr(module, "is_concatenated", True) is False):
        return None
    return _clamped_swiglu(module)


def _experts_layout(module):
    """The _Layout of transformers experts module `module`, checked to be
    what FusedExperts computes: gate_up_proj [E, 2I, H] (gate rows, then up
    rows) and down_proj [E, H, I], or both transposed (is_transposed), a
    SiLU gate, no biases; or gpt-oss's experts (gate and up interleaved,
    gate_up_proj_bias [E, 2I] and down_proj_bias [E, H], the clamped
    SwiGLU)."""
    name = type(module).__name__
    gate_up = getattr(module, "gate_up_proj", None)
    down = getattr(module, "down_proj", None)
    if not (isinstance(gate_up, torch.Tensor) and gate_up.dim() == 3
            and isinstance(down, torch.Tensor) and down.dim() == 3):
        raise ValueError(f"{name} has no 3-D gate_up_proj and down_proj "
                         "(the fused experts of transformers 5.x)")
    swiglu = _is_gpt_oss(module)
    if swiglu is None:
        _check_silu_experts(module, name)
    transposed = bool(getattr(module, "is_transposed", False))
    if transposed:
        experts, hidden, gate_and_up = gate_up.shape
        expected = (experts, gate_and_up // 2, hidden)
    else:
        experts, gate_and_up, hidden = gate_up.shape
        expected = (experts, hidden, gate_and_up // 2)
    if gate_and_up % 2 or tuple(down.shape) != expected:
        raise ValueError(f"{name}'s gate_up_proj {list(gate_up.shape)} and "
                         f"down_proj {list(down.shape)} are not the two "
                         f"projections of {experts} experts"
                         + (" (transposed)" if transposed else ""))
    if swiglu is not None:
        for bias, shape in (("gate_up_proj_bias", (experts, gate_and_up)),
                            ("down_proj_bias", (experts, hidden))):
            tensor = getattr(module, bias, None)
            if (not isinstance(tensor, torch.Tensor)
                    or tuple(tensor.shape) != shape):
                raise ValueError(f"{name} has no {bias} {list(shape)}")
    return _Layout(experts, hidden, gate_and_up // 2, transposed, swiglu)


def _check_silu_experts(module, name):
    """Raises ValueError unless experts module `module` computes
    SiLU-and-mul on gate rows then up rows, without biases."""
    if getattr(module, "has_bias", False) or any(
            getattr(module, bias, None) is not None
            for bias in ("gate_up_proj_bias", "down_proj_bias")):
        raise ValueError(f"{name} has biases; moe-mlir's experts have none")
    if not getattr(module, "has_gate", True):
        raise ValueError(f"{name} has no gate (act(up) alone); moe-mlir "
                         "computes SiLU-and-mul")
    if (getattr(module, "is_concatenated", True) is False
            or getattr(module, "projection_layout", None)
            not in (None, "concatenated_gate_up")):
        raise ValueError(f"{name} does not keep its gate rows before its up "
                         "rows (interleaved or split); moe-mlir reads them "
                         "concatenated")
    gate = getattr(type(module), "_apply_gate", None)
    if ((gate is not None and gate is not _default_apply_gate())
            or getattr(module, "gate_implementation", None)
            not in (None, "default")):
        raise ValueError(f"{name} has its own gate (_apply_gate); moe-mlir "
                         "computes act(gate) * up")
    if not _is_silu(getattr(module, "act_fn", None)):
        raise ValueError(f"{name}'s act_fn is not SiLU; moe-mlir computes "
                         "SiLU-and-mul")


def _experts_module_layer(layout, top_k):
    """The moe_mlir.Layer of an experts module of `layout` routed to
    `top_k` experts a token."""
    return Layer(layout.hidden, layout.intermediate, layout.experts,
                 Router("softmax", top_k), swiglu=layout.swiglu,
                 expert_biases=layout.swiglu is not None)


def _moe_weights(module, layout):
    """{"w13", "w2"[, "w13_bias", "w2_bias"]} of experts module `module`
    in FusedExperts' layout, detached (FusedExperts does no autograd): its
    parameters themselves where they have that layout and are readable in
    place, else contiguous copies (gpt-oss's by gpt_oss_weights)."""
    gate_up, down = module.gate_up_proj.detach(), module.down_proj.detach()
    if layout.swiglu is not None:
        if not layout.transposed:
            gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
        return gpt_oss_weights(gate_up, module.gate_up_proj_bias.detach(),
                               down, module.down_proj_bias.detach())
    if layout.transposed:
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    elif _readable_in_place(gate_up) and _readable_in_place(down):
        return {"w13": gate_up, "w2": down}
    return {"w13": gate_up.clone(memory_format=torch.contiguous_format),
            "w2": down.clone(memory_format=torch.contiguous_format)}


def _check_dtype(tensor, what):
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{what} are {tensor.dtype}; moe-mlir computes "
                        "bfloat16, float16 or float32")


def _in_pieces(run, tokens_max, *tensors):
    """run(*tensors) on at most `tokens_max` rows of them at a time, the
    results concatenated."""
    tokens = tensors[0].shape[0]
    if tokens <= tokens_max:
        return run(*tensors)
    return torch.cat([run(*(tensor[start:start + tokens_max]
                            for tensor in tensors))
                      for start in range(0, tokens, tokens_max)])


def _version(tensor):
    """`tensor`'s version counter (inference tensors have none)."""
    return None if tensor.is_inference() else tensor._version


class _ExpertsState:
    """An experts module's FusedExperts, what it was built for (`key`), the
    module's _Layout, and the weights it reads (`sources`: None until
    bound)."""

    def __init__(self, key, fused, layout):
        self.key = key
        self.fused = fused
        self.layout = layout
        self.sources = None


# The experts module's weights and biases, in _moe_weights' order.
_SOURCES = ("gate_up_proj", "down_proj", "gate_up_proj_bias",
            "down_proj_bias")


def _bind(state, module, layout):
    """Points state.fused's weights (and biases) at the module's
    (_moe_weights: their storage itself where it can, else converted
    copies); again whenever they change (a new tensor, address or
    version)."""
    tensors = [getattr(module, name) for name in
               _SOURCES[:4 if layout.swiglu is not None else 2]]
    sources = tuple((id(tensor), tensor.data_ptr(), _version(tensor))
                    for tensor in tensors)
    if state.sources == sources:
        return
    for name, tensor in _moe_weights(module, layout).items():
        setattr(state.fused, name,
                torch.nn.Parameter(tensor, requires_grad=False))
    state.sources = sources


def run_experts(module, hidden_states, top_k_index, top_k_weights, options):
    """transformers' experts forward of `module` through its FusedExperts:
    hidden_states [T, H], top_k_index [T, K] (an id outside [0, E) adds
    nothing, as expert parallelism's sentinels), top_k_weights [T, K] ->
    [T, H] in hidden_states' dtype. `options` are FusedExperts' tokens_max,
    cache_dir and config_db."""
    for name, tensor in (("hidden_states", hidden_states),
                         ("top_k_index", top_k_index),
                         ("top_k_weights", top_k_weights)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got "
                            f"{type(tensor).__name__}")
    if hidden_states.dim() != 2 or top_k_index.dim() != 2:
        raise ValueError(f"experts take hidden_states [T, H] and top_k_index "
                         f"[T, K], got {list(hidden_states.shape)} and "
                         f"{list(top_k_index.shape)}")
    device = hidden_states.device
    if device.type != "cuda":
        raise ValueError(f"the moe_mlir experts implementation runs on CUDA "
                         f"tensors; hidden_states are on {device} (use "
                         "'grouped_mm' there)")
    gate_up, down = module.gate_up_proj, module.down_proj
    transposed = bool(getattr(module, "is_transposed", False))
    key = (gate_up.dtype, gate_up.device, tuple(gate_up.shape),
           tuple(down.shape), transposed, top_k_index.shape[1], device,
           options)
    state = module.__dict__.get(_CACHE_ATTR)
    if state is None or state.key != key:
        layout = _experts_layout(module)
        _check_dtype(gate_up, f"{type(module).__name__}'s weights")
        if gate_up.device != device or down.device != device:
            raise ValueError(f"{type(module).__name__}'s weights are on "
                             f"{gate_up.device}, hidden_states on {device}")
        fused = FusedExperts(
            layer=_experts_module_layer(layout, top_k_index.shape[1]),
            dtype=gate_up.dtype, device=device, **options)
        state = _ExpertsState(key, fused, layout)
        module.__dict__[_CACHE_ATTR] = state
    _bind(state, module, state.layout)
    output = _in_pieces(state.fused, options["tokens_max"],
                        hidden_states.to(gate_up.dtype), top_k_index,
                        top_k_weights)
    return output.to(hidden_states.dtype)


def fused_experts_of(module):
    """The FusedExperts run_experts keeps on `module`, or None."""
    state = module.__dict__.get(_CACHE_ATTR)
    return state.fused if state is not None else None


def block_config(block):
    """The transformers config of MoE block `block` (its experts', which
    use_experts_implementation keeps, or its own, or its router's)."""
    for owner in (getattr(block, "experts", None), block,
                  getattr(block, "gate", None)):
        config = getattr(owner, "config", None)
        if config is not None:
            return config
    raise ValueError(f"{type(block).__name__} keeps no config (nor do its "
                     "experts or router)")


def _returns_pair(block):
    """Whether `block`'s forward returns (output, router_logits): a return
    of a pair in its source (False where the source is not there)."""
    try:
        source = textwrap.dedent(inspect.getsource(type(block).forward))
    except (OSError, TypeError):
        return False
    return any(isinstance(node, ast.Return)
               and isinstance(node.value, ast.Tuple)
               and len(node.value.elts) == 2
               for node in ast.walk(ast.parse(source)))


def _shared_weights(block, layer):
    """(w13 [X, 2I, H], w2 [X, H, I]) of `block`'s shared experts as X
    experts of the routed size, or None for a layer without: one MLP of
    intermediate size X*I is X experts of size I, since SiLU-and-mul acts
    per intermediate column and down_proj sums over them."""
    count = layer.router.num_shared_experts
    name = type(block).__name__
    shared = getattr(block, "shared_experts", None)
    if count == 0:
        if (shared is not None
                or getattr(block, "shared_expert", None) is not None):
            raise ValueError(f"{name} has a shared expert its config does "
                             "not describe")
        return None
    if shared is None:
        raise ValueError(f"{name} has no shared_experts; its config says "
                         f"{count}")
    hidden, inter = layer.hidden_size, layer.intermediate_size
    projections = [getattr(shared, part, None)
                   for part in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(p, torch.nn.Linear) and p.bias is None
               for p in projections):
        raise ValueError(f"{name}'s shared experts are not gate_proj, up_proj "
                         "and down_proj linear layers without bias")
    gate, up, down = (p.weight for p in projections)
    if (tuple(gate.shape) != (count * inter, hidden)
            or tuple(up.shape) != gate.shape
            or tuple(down.shape) != (hidden, count * inter)):
        raise ValueError(f"{name}'s shared experts are not {count} of "
                         f"intermediate size {inter} (gate_proj "
                         f"{list(gate.shape)}, down_proj {list(down.shape)})")
    if not _is_silu(getattr(shared, "act_fn", None)):
        raise ValueError(f"{name}'s shared experts' act_fn is not SiLU")
    w13 = torch.cat([gate.view(count, inter, hidden),
                     up.view(count, inter, hidden)], dim=1)
    w2 = down.view(hidden, count, inter).permute(1, 0, 2)
    return w13, w2


def _correction_bias(block, layer, strict):
    """The router's correction bias (float32 [E]) of a layer with one."""
    if not layer.correction_bias:
        return None
    name = type(block).__name__
    bias = getattr(block.gate, "e_score_correction_bias", None)
    if bias is None or tuple(bias.shape) != (layer.num_experts,):
        raise ValueError(f"{name}'s router has no e_score_correction_bias "
                         f"[{layer.num_experts}]")
    if strict and bool((bias < 0).any()):
        raise ValueError(
            f"{name}'s correction bias has negative entries: transformers "
            "fills the scores of dropped groups with 0, moe.gate drops them, "
            "so a token whose eligible selection scores fall below 0 would "
            "route differently (strict=False routes as moe.gate, as "
            "DeepSeek's reference does)")
    return bias.detach().float()


class FusedMoEBlock(torch.nn.Module):
    """A transformers MoE block run by moe-mlir (from
    moe_mlir.transformers.fused_moe_from_hf).

    ``gate_weight`` [E, H] and ``gate_bias`` [E] (gpt-oss's; None for the
    routers without), copies of the block's router's, give the router
    logits as the block's router computes them (router_logits: in float32
    with ``float32_logits``, else in the hidden states' dtype); ``moe``, a
    moe_mlir.torch.FusedMoE carrying copies of the block's experts, routes
    and computes the layer. forward takes hidden states [..., H] and
    returns the output in their shape, and with ``returns_router_logits``
    a second output too, as the block's forward does: the router logits
    [tokens, E], or with ``returns_router_scores`` the routing weights
    [tokens, top_k] that gpt-oss's router returns (a softmax over the
    top-k logits). Inference only.
    """

    def __init__(self, moe, gate_weight, float32_logits,
                 returns_router_logits, gate_bias=None,
                 returns_router_scores=False):
        super().__init__()
        self.moe = moe
        self.gate_weight = torch.nn.Parameter(gate_weight,
                                              requires_grad=False)
        self.gate_bias = (None if gate_bias is None else torch.nn.Parameter(
            gate_bias, requires_grad=False))
        self.float32_logits = float32_logits
        self.returns_router_logits = returns_router_logits
        self.returns_router_scores = returns_router_scores

    def router_logits(self, hidden_states):
        """The router logits [T, E] of hidden states [T, H]."""
        if self.float32_logits:
            return F.linear(hidden_states.float(), self.gate_weight.float(),
                            None if self.gate_bias is None
                            else self.gate_bias.float())
        return F.linear(hidden_states, self.gate_weight, self.gate_bias)

    def forward(self, hidden_states):
        """The block's output for hidden states [..., H] (and the router
        logits or scores with returns_router_logits)."""
        hidden_size = self.moe.layer.hidden_size
        if not isinstance(hidden_states, torch.Tensor):
            raise TypeError(f"hidden_states must be a torch.Tensor, got "
                            f"{type(hidden_states).__name__}")
        if hidden_states.dim() == 0 or hidden_states.shape[-1] != hidden_size:
            raise ValueError(f"hidden_states must have shape [..., "
                             f"{hidden_size}], got "
                             f"{list(hidden_states.shape)}")
        flat = hidden_states.reshape(-1, hidden_size)
        logits = self.router_logits(flat)
        output = _in_pieces(self.moe, self.moe.tokens_max, flat, logits)
        output = output.view(hidden_states.shape)
        if not self.returns_router_logits:
            return output
        if self.returns_router_scores:
            top = logits.topk(self.moe.layer.router.top_k, dim=-1).values
            return output, F.softmax(top, dim=1, dtype=top.dtype)
        return output, logits

    def extra_repr(self):
        return (f"float32_logits={self.float32_logits}, "
                f"returns_router_logits={self.returns_router_logits}, "
                f"returns_router_scores={self.returns_router_scores}")


def fused_moe_block(block, layer, family, strict, returns_router_logits,
                    options):
    """The FusedMoEBlock of transformers MoE block `block`, whose routing is
    `layer`'s and whose family's is `family` (moe_mlir.transformers'
    _Family; see moe_mlir.transformers.fused_moe_from_hf)."""
    name = type(block).__name__
    layout = _experts_layout(block.experts)
    if (layout.experts, layout.hidden, layout.intermediate) != (
            layer.num_experts, layer.hidden_size, layer.intermediate_size):
        raise ValueError(f"{name}'s experts are E={layout.experts}, "
                         f"H={layout.hidden}, I={layout.intermediate}; its "
                         f"config says E={layer.num_experts}, "
                         f"H={layer.hidden_size}, "
                         f"I={layer.intermediate_size}")
    if (layout.swiglu is None) != (layer.swiglu is None):
        raise ValueError(f"{name}'s experts compute "
                         + ("SiLU-and-mul without biases"
                            if layout.swiglu is None
                            else "gpt-oss's clamped SwiGLU with biases")
                         + f"; its config's layer {layer} does not")
    # The experts module's own limit and alpha are what the block computes.
    layer = dataclasses.replace(layer, swiglu=layout.swiglu)
    router = getattr(block, family.router)
    gate_weight = getattr(router, "weight", None)
    if (not isinstance(gate_weight, torch.Tensor)
            or tuple(gate_weight.shape) != (layout.experts, layout.hidden)):
        raise ValueError(f"{name}'s router has no weight [{layout.experts}, "
                         f"{layout.hidden}]")
    gate_bias = getattr(router, "bias", None)
    if gate_bias is not None and not family.router_bias:
        raise ValueError(f"{name}'s router has a bias; moe.gate takes the "
                         "logits of a linear layer without one")
    if family.router_bias and (not isinstance(gate_bias, torch.Tensor) or
                               tuple(gate_bias.shape) != (layout.experts,)):
        raise ValueError(f"{name}'s router has no bias [{layout.experts}]")
    gate_up = block.experts.gate_up_proj
    _check_dtype(gate_up, f"{name}'s expert weights")
    if gate_up.device.type != "cuda":
        raise ValueError(f"{name} is on {gate_up.device}; FusedMoE runs on "
                         "CUDA (move the model with .cuda() first)")
    shared = _shared_weights(block, layer)
    bias = _correction_bias(block, layer, strict)
    moe = FusedMoE(layer=layer, dtype=gate_up.dtype, device=gate_up.device,
                   **options)
    experts = layout.experts
    with torch.no_grad():
        for weight, tensor in _moe_weights(block.experts, layout).items():
            getattr(moe, weight)[:experts].copy_(tensor)
        if shared is not None:
            moe.w13[experts:].copy_(shared[0])
            moe.w2[experts:].copy_(shared[1])
        if bias is not None:
            moe.correction_bias.copy_(bias)
    if returns_router_logits is None:
        returns_router_logits = _returns_pair(block)
    return FusedMoEBlock(
        moe, gate_weight.detach().clone(), family.float32_logits,
        returns_router_logits,
        None if gate_bias is None else gate_bias.detach().clone(),
        family.returns_scores)
