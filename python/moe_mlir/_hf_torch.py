"""The torch half of moe_mlir.transformers: the "moe_mlir" experts
implementation (run_experts) and FusedMoEBlock (fused_moe_block).
moe_mlir.transformers imports it when a model first needs it; the names
(gate_up_proj, is_transposed, ...) are those of transformers 5.x's experts
modules and the use_experts_implementation decorator."""

import ast
import inspect
import textwrap

import torch
import torch.nn.functional as F

from .torch import FusedExperts, FusedMoE, _readable_in_place

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


def _experts_layout(module):
    """(E, H, I, transposed) of transformers experts module `module`, checked
    to be what FusedExperts computes: gate_up_proj [E, 2I, H] (gate rows,
    then up rows) and down_proj [E, H, I], or both transposed
    (is_transposed), a SiLU gate, no biases."""
    name = type(module).__name__
    gate_up = getattr(module, "gate_up_proj", None)
    down = getattr(module, "down_proj", None)
    if not (isinstance(gate_up, torch.Tensor) and gate_up.dim() == 3
            and isinstance(down, torch.Tensor) and down.dim() == 3):
        raise ValueError(f"{name} has no 3-D gate_up_proj and down_proj "
                         "(the fused experts of transformers 5.x)")
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
    return experts, hidden, gate_and_up // 2, transposed


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
    """An experts module's FusedExperts, what it was built for (`key`), and
    the weights it reads (`sources`: None until bound)."""

    def __init__(self, key, fused):
        self.key = key
        self.fused = fused
        self.sources = None


def _bind(state, gate_up, down, transposed):
    """Points state.fused's w13 and w2 at the module's weights: their
    storage itself (detached: FusedExperts does no autograd) when their
    layout and addresses are FusedExperts', else contiguous copies in its
    layout; again whenever the weights change (a new tensor, address or
    version)."""
    sources = (id(gate_up), gate_up.data_ptr(), _version(gate_up),
               id(down), down.data_ptr(), _version(down))
    if state.sources == sources:
        return
    fused = state.fused
    if (not transposed and _readable_in_place(gate_up)
            and _readable_in_place(down)):
        w13, w2 = gate_up.detach(), down.detach()
    else:
        w13 = (gate_up.transpose(1, 2) if transposed else gate_up).detach()
        w2 = (down.transpose(1, 2) if transposed else down).detach()
        w13 = w13.clone(memory_format=torch.contiguous_format)
        w2 = w2.clone(memory_format=torch.contiguous_format)
    fused.w13 = torch.nn.Parameter(w13, requires_grad=False)
    fused.w2 = torch.nn.Parameter(w2, requires_grad=False)
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
        experts, hidden, intermediate, transposed = _experts_layout(module)
        _check_dtype(gate_up, f"{type(module).__name__}'s weights")
        if gate_up.device != device or down.device != device:
            raise ValueError(f"{type(module).__name__}'s weights are on "
                             f"{gate_up.device}, hidden_states on {device}")
        fused = FusedExperts(experts, hidden, intermediate,
                             top_k_index.shape[1], dtype=gate_up.dtype,
                             device=device, **options)
        state = _ExpertsState(key, fused)
        module.__dict__[_CACHE_ATTR] = state
    _bind(state, gate_up, down, transposed)
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

    ``gate_weight`` [E, H], a copy of the block's router weight, gives the
    router logits as the block's router computes them (router_logits: in
    float32 with ``float32_logits``, else in the hidden states' dtype);
    ``moe``, a moe_mlir.torch.FusedMoE carrying copies of the block's
    experts, routes and computes the layer. forward takes hidden states
    [..., H] and returns the output in their shape, and with
    ``returns_router_logits`` the router logits [tokens, E] too, as the
    block's forward does. Inference only.
    """

    def __init__(self, moe, gate_weight, float32_logits,
                 returns_router_logits):
        super().__init__()
        self.moe = moe
        self.gate_weight = torch.nn.Parameter(gate_weight,
                                              requires_grad=False)
        self.float32_logits = float32_logits
        self.returns_router_logits = returns_router_logits

    def router_logits(self, hidden_states):
        """The router logits [T, E] of hidden states [T, H]."""
        if self.float32_logits:
            return F.linear(hidden_states.float(), self.gate_weight.float())
        return F.linear(hidden_states, self.gate_weight)

    def forward(self, hidden_states):
        """The block's output for hidden states [..., H] (and the router
        logits with returns_router_logits)."""
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
        return (output, logits) if self.returns_router_logits else output

    def extra_repr(self):
        return (f"float32_logits={self.float32_logits}, "
                f"returns_router_logits={self.returns_router_logits}")


def fused_moe_block(block, layer, float32_logits, strict,
                    returns_router_logits, options):
    """The FusedMoEBlock of transformers MoE block `block`, whose routing is
    `layer`'s (see moe_mlir.transformers.fused_moe_from_hf)."""
    name = type(block).__name__
    experts = block.experts
    num_experts, hidden, inter, transposed = _experts_layout(experts)
    if (num_experts, hidden, inter) != (layer.num_experts, layer.hidden_size,
                                        layer.intermediate_size):
        raise ValueError(f"{name}'s experts are E={num_experts}, H={hidden}, "
                         f"I={inter}; its config says E={layer.num_experts}, "
                         f"H={layer.hidden_size}, "
                         f"I={layer.intermediate_size}")
    gate_weight = getattr(block.gate, "weight", None)
    if (not isinstance(gate_weight, torch.Tensor)
            or tuple(gate_weight.shape) != (num_experts, hidden)):
        raise ValueError(f"{name}'s router has no weight [{num_experts}, "
                         f"{hidden}]")
    if getattr(block.gate, "bias", None) is not None:
        raise ValueError(f"{name}'s router has a bias; moe.gate takes the "
                         "logits of a linear layer without one")
    gate_up, down = experts.gate_up_proj, experts.down_proj
    _check_dtype(gate_up, f"{name}'s expert weights")
    if gate_up.device.type != "cuda":
        raise ValueError(f"{name} is on {gate_up.device}; FusedMoE runs on "
                         "CUDA (move the model with .cuda() first)")
    shared = _shared_weights(block, layer)
    bias = _correction_bias(block, layer, strict)
    moe = FusedMoE(layer=layer, dtype=gate_up.dtype, device=gate_up.device,
                   **options)
    with torch.no_grad():
        moe.w13[:num_experts].copy_(gate_up.transpose(1, 2) if transposed
                                    else gate_up)
        moe.w2[:num_experts].copy_(down.transpose(1, 2) if transposed
                                   else down)
        if shared is not None:
            moe.w13[num_experts:].copy_(shared[0])
            moe.w2[num_experts:].copy_(shared[1])
        if bias is not None:
            moe.correction_bias.copy_(bias)
    if returns_router_logits is None:
        returns_router_logits = _returns_pair(block)
    return FusedMoEBlock(moe, gate_weight.detach().clone(), float32_logits,
                         returns_router_logits)
