"""Tensors for the GPU tests: random inputs away from zero, outputs poisoned
so that an unwritten element shows, bit patterns to compare exactly, and the
error norms the tolerances are stated in."""

import torch

from ..torch import empty_outputs

# What integer outputs are poisoned with: no id, count or offset.
POISON_INT = -123456789


def uniform(generator, *shape, scale=1.0, low=-1.0):
    """Uniform in [low, 1) * scale, drawn from `generator` on its device."""
    return (torch.rand(*shape, generator=generator, device=generator.device)
            * (1 - low) + low) * scale


def poison(tensor):
    """Fills `tensor` with NaN (floating point) or POISON_INT; returns it."""
    return tensor.fill_(float("nan") if tensor.is_floating_point()
                        else POISON_INT)


def poisoned(shape, dtype, device="cuda"):
    """A new tensor of `shape` and `dtype` filled with poison."""
    return poison(torch.empty(shape, dtype=dtype, device=device))


def poisoned_outputs(bundle, tokens):
    """The outputs of moe_mlir.Bundle `bundle` at `tokens` tokens, on its
    device, filled with poison."""
    return [poison(output) for output in empty_outputs(bundle, tokens)]


def bits(tensor):
    """The tensor's bit patterns, so that -0 differs from +0 and NaN ==
    NaN."""
    width = {4: torch.int32, 2: torch.int16}[tensor.element_size()]
    return tensor.contiguous().view(-1).view(width)


def same_bits(first, second):
    """Whether the tensors of `first` and `second` are equal bit for bit."""
    return all(torch.equal(bits(a), bits(b)) for a, b in zip(first, second))


def relative_errors(actual, expected):
    """(max |error| / max |expected|, ||error|| / ||expected||) in float64."""
    actual, expected = actual.double(), expected.double()
    error = actual - expected
    largest = expected.abs().max().item()
    norm = expected.norm().item()
    return (error.abs().max().item() / max(largest, 1e-30),
            error.norm().item() / max(norm, 1e-30))
