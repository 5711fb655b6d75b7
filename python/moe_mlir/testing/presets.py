"""The presets' layers, full-size and reduced, written out: the GPU
machine's moe_mlir has no compiler to read the presets from, so the
multi-GPU tests and benchmarks and the expert-parallel test take them from
here, and their --prepare, which runs where the compiler is, checks that
they agree (check_full_presets, check_reduced_presets). Imports no torch."""

from ..layers import Layer, Router

FULL_PRESETS = {
    "mixtral-8x7b": Layer(4096, 14336, 8,
                          Router("softmax", 2, renormalize=True)),
    "qwen3-30b-a3b": Layer(2048, 768, 128,
                           Router("softmax", 8, renormalize=True)),
    "deepseek-v3": Layer(
        7168, 2048, 256,
        Router("sigmoid", 8, num_groups=8, topk_groups=4, renormalize=True,
               routed_scaling_factor=2.5, num_shared_experts=1),
        correction_bias=True),
}

#: Layer.preset(name, reduced=True): hidden and intermediate sizes / 32.
REDUCED_PRESETS = {name: layer.shrunk(32)
                   for name, layer in FULL_PRESETS.items()}


def check_full_presets():
    """Raises AssertionError unless FULL_PRESETS are the compiler's."""
    _check(FULL_PRESETS, reduced=False)


def check_reduced_presets():
    """Raises AssertionError unless REDUCED_PRESETS are the compiler's."""
    _check(REDUCED_PRESETS, reduced=True)


def _check(presets, reduced):
    for name, layer in presets.items():
        if layer != Layer.preset(name, reduced=reduced):
            raise AssertionError(f"the {'reduced ' if reduced else ''}"
                                 f"preset {name!r} written out differs from "
                                 f"the compiler's")
