"""Hugging Face transformers 5.x through moe-mlir, at two seams.

The experts interface: register() adds "moe_mlir" to transformers' experts
implementations (transformers.integrations.moe.ExpertsInterface), so that a
model built with ``experts_implementation="moe_mlir"`` (from_pretrained,
from_config) or switched with ``model.set_experts_implementation("moe_mlir")``
runs every experts module -- the routed experts, after the model's own
router -- through moe_mlir.torch.FusedExperts, one per module, built at its
first forward::

    import moe_mlir.transformers
    moe_mlir.transformers.register()
    model.set_experts_implementation("moe_mlir")

The whole block: fused_moe_from_hf(block) turns a Mixtral, Qwen3-MoE,
DeepSeek-V3 or gpt-oss MoE block into a FusedMoEBlock: the block's router
logits, then moe_mlir.torch.FusedMoE with moe's router (moe.gate), carrying
copies of the block's router, routed and shared experts' weights (and
gpt-oss's expert biases). It refuses a block whose routing moe.gate does
not compute.

layer_from_config(config) is the moe_mlir.Layer of a model's MoE blocks,
from its config (a transformers config or a plain dict with the same keys);
prepare_bundles compiles, where the compiler is, the bundles both seams will
look for on a GPU machine without one. These need neither torch nor
transformers: importing this module imports neither, register and
fused_moe_from_hf import both and raise moe_mlir.Error when transformers 5.x
is missing.
"""

import collections
import importlib

from . import layers
from ._errors import Error
from .layers import Layer, Router

__all__ = ["BLOCK_CLASSES", "EXPERTS_IMPLEMENTATION",
           "SUPPORTED_MODEL_TYPES", "experts_layer", "fused_experts_of",
           "fused_moe_from_hf", "layer_from_config", "prepare_bundles",
           "register"]

#: The name register() gives moe-mlir in transformers' experts interface.
EXPERTS_IMPLEMENTATION = "moe_mlir"

# transformers' hidden_act names of SiLU, the gate activation moe computes.
_SILU_NAMES = ("silu", "swish")


def _field(config, name, default=None, required=True):
    """`name` of a transformers config (an attribute, aliases resolved by
    the config) or of a dict (a key)."""
    if isinstance(config, dict):
        if name in config:
            return config[name]
    elif hasattr(config, name):
        return getattr(config, name)
    if required:
        raise ValueError(f"the config has no {name!r}")
    return default


def _check_silu(config, model_type):
    act = _field(config, "hidden_act")
    if act not in _SILU_NAMES:
        raise ValueError(f"moe-mlir's experts compute SiLU-and-mul; this "
                         f"{model_type} config has hidden_act {act!r}")


def _mixtral_layer(config):
    """Mixtral: softmax over the experts, top-k, renormalized."""
    _check_silu(config, "mixtral")
    return Layer(_field(config, "hidden_size"),
                 _field(config, "intermediate_size"),
                 _field(config, "num_local_experts"),
                 Router("softmax", _field(config, "num_experts_per_tok"),
                        renormalize=True))


def _qwen3_moe_layer(config):
    """Qwen3-MoE: softmax, top-k, renormalized when norm_topk_prob."""
    _check_silu(config, "qwen3_moe")
    return Layer(_field(config, "hidden_size"),
                 _field(config, "moe_intermediate_size"),
                 _field(config, "num_experts"),
                 Router("softmax", _field(config, "num_experts_per_tok"),
                        renormalize=bool(_field(config, "norm_topk_prob"))))


def _deepseek_v3_layer(config):
    """DeepSeek-V3: sigmoid scores, a correction bias for selection, the
    best topk_group of n_group groups (a group scores its two best),
    top-k, renormalized when norm_topk_prob, times routed_scaling_factor;
    n_shared_experts shared experts of moe_intermediate_size each."""
    _check_silu(config, "deepseek_v3")
    for name, expected in (("topk_method", "noaux_tc"),
                           ("scoring_func", "sigmoid")):
        value = _field(config, name, expected, required=False)
        if value != expected:
            raise ValueError(f"DeepSeek-V3's router is {name} "
                             f"{expected!r}; this config has {value!r}")
    experts = _field(config, "n_routed_experts")
    top_k = _field(config, "num_experts_per_tok")
    groups = _field(config, "n_group") or 1
    kept = _field(config, "topk_group") or 1
    if experts % groups:
        raise ValueError(f"{experts} experts do not split into n_group "
                         f"{groups} groups")
    if kept * (experts // groups) < top_k:
        raise ValueError(f"topk_group {kept} groups of {experts // groups} "
                         f"experts hold fewer than top_k {top_k}: "
                         "transformers would then pick masked experts")
    router = Router("sigmoid", top_k, num_groups=groups, topk_groups=kept,
                    renormalize=bool(_field(config, "norm_topk_prob")),
                    routed_scaling_factor=float(
                        _field(config, "routed_scaling_factor")),
                    num_shared_experts=_field(config, "n_shared_experts") or 0)
    return Layer(_field(config, "hidden_size"),
                 _field(config, "moe_intermediate_size"), experts, router,
                 correction_bias=True)


#: The alpha of gpt-oss's clamped SwiGLU (transformers' GptOssExperts fixes
#: it; its limit is the config's swiglu_limit).
GPT_OSS_ALPHA = 1.702


def _gpt_oss_layer(config):
    """gpt-oss: the router's linear layer (with bias) gives logits, of which
    top-k are softmaxed, which is moe.gate's softmax, top-k, renormalized
    (softmax is monotonic, and the renormalized weights are the softmax
    over the chosen: DESIGN.md, section 2); experts with biases and the
    clamped SwiGLU (alpha 1.702, limit swiglu_limit, 7 unless given), which
    ignore hidden_act."""
    return Layer(_field(config, "hidden_size"),
                 _field(config, "intermediate_size"),
                 _field(config, "num_local_experts"),
                 Router("softmax", _field(config, "num_experts_per_tok"),
                        renormalize=True),
                 swiglu=(GPT_OSS_ALPHA, _field(config, "swiglu_limit", 7.0,
                                               required=False)),
                 expert_biases=True)


# What moe-mlir knows of each model family: its layer from the config, the
# class of its MoE block, whether the block's router computes its logits in
# float32 (else in the hidden states' dtype), the block's attribute holding
# its router, whether the router's linear layer has a bias, and what the
# second of a pair the block returns is: its router logits, or (gpt-oss)
# its top-k routing weights.
_Family = collections.namedtuple(
    "_Family",
    "layer block_class float32_logits router router_bias returns_scores")
_FAMILIES = {
    "mixtral": _Family(_mixtral_layer, "MixtralSparseMoeBlock", False,
                       "gate", False, False),
    "qwen3_moe": _Family(_qwen3_moe_layer, "Qwen3MoeSparseMoeBlock", False,
                         "gate", False, False),
    "deepseek_v3": _Family(_deepseek_v3_layer, "DeepseekV3MoE", True, "gate",
                           False, False),
    "gpt_oss": _Family(_gpt_oss_layer, "GptOssMLP", False, "router", True,
                       True),
}

#: The model types whose MoE blocks layer_from_config and fused_moe_from_hf
#: map (any model whose experts use transformers' experts interface runs
#: through register()).
SUPPORTED_MODEL_TYPES = tuple(_FAMILIES)
#: The class of each supported model type's MoE block, in transformers'
#: transformers.models.<model type>.modeling_<model type>.
BLOCK_CLASSES = {model_type: family.block_class
                 for model_type, family in _FAMILIES.items()}


def layer_from_config(config, model_type=None):
    """The moe_mlir.Layer of the MoE blocks of a model with `config` (a
    transformers config, or a dict with its keys, "model_type" among them
    unless `model_type` is given): sizes, router, shared experts, correction
    bias, gpt-oss's expert biases and clamped SwiGLU, exactly as
    transformers routes and computes that family.

    Raises ValueError for a model type outside SUPPORTED_MODEL_TYPES, an
    activation other than SiLU (but for gpt-oss, whose experts have their
    own), or routing moe.gate does not compute.
    """
    model_type = model_type or _field(config, "model_type")
    family = _FAMILIES.get(model_type)
    if family is None:
        raise ValueError(f"moe-mlir maps the MoE blocks of "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)}; not of "
                         f"model_type {model_type!r}")
    return family.layer(config)


def experts_layer(layer):
    """The routed experts of `layer` alone, as the experts interface runs
    them (the model routes; its shared experts stay outside): E, H, I,
    top_k, the activation and expert biases of `layer`, no shared experts,
    no correction bias."""
    return Layer(layer.hidden_size, layer.intermediate_size,
                 layer.num_experts, Router("softmax", layer.router.top_k),
                 swiglu=layer.swiglu, expert_biases=layer.expert_biases)


def _experts_bundle(layer, dtype, cache_dir, tokens_max, config_db):
    """The bundle moe_mlir.torch.FusedExperts loads for `layer`'s routed
    experts (the same cache key), compiled without torch."""
    return layers.layer_bundle(experts_layer(layer), dtype, part="experts",
                               cache_dir=cache_dir, tokens_max=tokens_max,
                               config_db=config_db)


def prepare_bundles(configs, *, dtype="bf16", cache_dir=None,
                    tokens_max=16384, config_db=None, experts=True,
                    blocks=True):
    """Compiles (on a machine with moe_mlir's compiler; no torch needed) the
    bundles that the MoE blocks of models with `configs` (transformers
    configs or dicts, see layer_from_config) will look for in `cache_dir`:
    with `experts`, FusedExperts' for register()'s experts implementation,
    with `blocks`, FusedMoE's for fused_moe_from_hf, each for `dtype` and up
    to `tokens_max` tokens, for the default target device (a GPU machine of
    another kind compiles its own). Returns their paths."""
    paths = []
    for config in configs:
        layer = layer_from_config(config)
        if experts:
            paths.append(_experts_bundle(layer, dtype, cache_dir, tokens_max,
                                         config_db))
        if blocks:
            paths.append(layers.layer_bundle(
                layer, dtype, cache_dir=cache_dir, tokens_max=tokens_max,
                config_db=config_db))
    return paths


def _require_transformers(what):
    """transformers.integrations.moe, or Error when transformers 5.x (its
    experts interface) is not there."""
    try:
        transformers = importlib.import_module("transformers")
        moe = importlib.import_module("transformers.integrations.moe")
    except ImportError as error:
        raise Error(f"{what} needs Hugging Face transformers 5.x, which "
                    f"cannot be imported: {error}") from error
    if not hasattr(moe, "ALL_EXPERTS_FUNCTIONS"):
        raise Error(f"{what} needs transformers' experts interface "
                    f"(transformers 5.x); transformers "
                    f"{transformers.__version__} has none")
    return moe


def register(*, tokens_max=16384, cache_dir=None, config_db=None):
    """Registers moe-mlir as the experts implementation "moe_mlir"
    (EXPERTS_IMPLEMENTATION) in transformers' ExpertsInterface, for every
    model in this process; returns the name.

    A model then takes it as any other implementation: from_pretrained or
    from_config with ``experts_implementation="moe_mlir"``, or
    ``model.set_experts_implementation("moe_mlir")``. Each experts module
    (gate_up_proj [E, 2I, H] and down_proj [E, H, I], or transposed, with a
    SiLU gate and no biases; or gpt-oss's, gate and up interleaved, with
    biases and the clamped SwiGLU) gets a moe_mlir.torch.FusedExperts at its first
    forward, kept on the module (fused_experts_of), compiled (or found in
    `cache_dir`) for up to `tokens_max` tokens per call -- longer inputs
    run in pieces -- with the tuned configs of `config_db`. It reads the
    module's weights in place when their layout is FusedExperts' (w13 [E,
    2I, H], gate rows then up rows; w2 [E, H, I]), else converts them once
    (gpt-oss's: moe_mlir.torch.gpt_oss_weights) and again whenever the
    parameters change (their version: an in-place
    change through ``.data`` goes unseen) or are replaced. The module's
    weights' dtype (bf16, f16 or f32) is the one it computes in.

    Forward raises TypeError for another dtype, ValueError for an experts
    module moe-mlir does not compute (another activation, biases, an
    interleaved or custom gate) and for tensors not on a CUDA device. Calling
    register again replaces the options.
    """
    moe = _require_transformers("moe_mlir.transformers.register")
    options = {"tokens_max": tokens_max, "cache_dir": cache_dir,
               "config_db": config_db}

    def moe_mlir_experts_forward(module, hidden_states, top_k_index,
                                 top_k_weights):
        """transformers' experts forward, run by moe_mlir.torch.
        FusedExperts."""
        from . import _hf_torch
        return _hf_torch.run_experts(module, hidden_states, top_k_index,
                                     top_k_weights, options)

    # Through the interface's instance, which works whether register is a
    # class method (transformers 5.x: the class-wide mapping) or an
    # instance's (its own mapping, which lookups try first).
    moe.ALL_EXPERTS_FUNCTIONS.register(EXPERTS_IMPLEMENTATION,
                                       moe_mlir_experts_forward)
    return EXPERTS_IMPLEMENTATION


def fused_experts_of(module):
    """The moe_mlir.torch.FusedExperts that the "moe_mlir" implementation
    runs experts module `module` through, or None before its first forward
    there."""
    from . import _hf_torch
    return _hf_torch.fused_experts_of(module)


def fused_moe_from_hf(block, *, strict=True, tokens_max=16384,
                      cache_dir=None, config_db=None,
                      returns_router_logits=None):
    """A FusedMoEBlock for transformers MoE block `block`: a Mixtral
    (MixtralSparseMoeBlock), Qwen3-MoE (Qwen3MoeSparseMoeBlock),
    DeepSeek-V3 (DeepseekV3MoE) or gpt-oss (GptOssMLP) block of
    transformers 5.x on a CUDA device.

    The FusedMoEBlock computes the block's router logits as the block does
    (its router's linear layer, gpt-oss's with its bias), then runs
    moe_mlir.torch.FusedMoE (its ``moe``) with the layer of
    layer_from_config: moe.gate routes as the block's router does, the
    routed experts and DeepSeek's shared experts (split into experts of the
    routed size, weight 1) are copies of the block's weights (gpt-oss's
    converted by moe_mlir.torch.gpt_oss_weights, biases included). Its
    forward takes hidden states [..., H] as the block's does and returns
    what the block returns: the output in the input's shape, and the
    router logits too when the block's forward returns a pair
    (`returns_router_logits` overrides what its source says), for gpt-oss
    its routing weights [tokens, top_k] (the softmax over the top-k
    logits, as GptOssTopKRouter computes them).
    Inference only; FusedMoE is compiled (or found in `cache_dir`) for up to
    `tokens_max` tokens per call (longer inputs run in pieces) with the
    tuned configs of `config_db`.

    DeepSeek-V3's router in transformers fills the scores of dropped groups
    with 0 where moe.gate (and DeepSeek's reference) drops them: the two
    choose the same experts while every selection score is positive, which
    a correction bias >= 0 guarantees. With `strict` a negative correction
    bias raises ValueError; strict=False accepts it and routes as moe.gate.

    Raises TypeError for a module that is not one of these blocks or
    weights of an unsupported dtype, ValueError for a block moe-mlir does
    not compute exactly (another activation, biases, a gated shared expert,
    sizes that disagree with the config, weights not on a CUDA device).
    """
    _require_transformers("moe_mlir.transformers.fused_moe_from_hf")
    from . import _hf_torch
    model_type = next((name for name, block_class in BLOCK_CLASSES.items()
                       if type(block).__name__ == block_class), None)
    if model_type is None:
        raise TypeError(f"fused_moe_from_hf takes a "
                        f"{', '.join(BLOCK_CLASSES.values())}; got "
                        f"{type(block).__name__}")
    config = _hf_torch.block_config(block)
    layer = layer_from_config(config, model_type)
    return _hf_torch.fused_moe_block(
        block, layer, _FAMILIES[model_type], strict=strict,
        returns_router_logits=returns_router_logits,
        options={"tokens_max": tokens_max, "cache_dir": cache_dir,
                 "config_db": config_db})
