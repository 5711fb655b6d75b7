#!/usr/bin/env python3
"""CPU test of moe_mlir.testing.fp8.check, the FP8 GPU tests' comparison:
that it passes what fp8 experts may lawfully compute and fails real bugs.

A simulated device computes fp8 experts as the GPU does, in float32: the
first GEMM's sums off by a random error (rms 2^-12 of the norm of their
terms, which makes the raw errors the H100 shows, and 2^-11), the
activation in float32, the intermediate rounded to bf16 and quantized
(128-column groups, per token, or by a static scale that the largest
values exceed), the second GEMM in float32, each slot row and the output
rounded to bf16; a token's rows of one expert alike; also as two
tensor-parallel ranks, each summing its half of the intermediate's columns
and rounding its slot rows and partial output. Its output, the
reference's own and the plain C++ reference's (an independent fp32
implementation, where --build has libmoe_reference.so) must pass; the
device with a bug must fail: an output element 4 % off, a token's row 3 %
off, its heaviest slot left out, the intermediate rounded to e4m3 toward
zero, scaled by its neighbour group's scale, one of its columns a code off
(from T = 7: at T = 1 that column's few elements may all be small), or,
at T = 64, quantized without its bf16 rounding (whose error, of the
lawful flips' size and shape, is a signal only over many tokens), and the
output 1.5 % off. Layers of 1, 7 and 64 tokens, ids out of range and an
expert routed twice by one token among them. Also: fp8.e4m3 rounds as the
C++ reference's toE4M3 and torch's float8_e4m3fn, bit for bit. Needs
torch (1.13 on), no GPU; prints PASS or FAIL per check and exits non-zero
on any failure:

    PYTHONPATH=build-runtime/python python3 test/GPU/fp8_check_test.py
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

from moe_mlir.testing import fp8

HIDDEN, INTERMEDIATE, EXPERTS, SLOTS = 384, 256, 6, 3
BLOCK = 128
# The bugs the check must see, each a change of the simulated device.
BUGS = ("element 4 % off", "token row 3 % off", "slot left out",
        "no bf16 rounding", "e4m3 toward zero", "neighbour group's scale",
        "1.5 % everywhere", "a column one code off")
# The intermediate's column the last bug moves.
COLUMN = 7


class Layer:
    """Random fp8 experts (e4m3 weights with per-channel scales, exact in
    float64), routing with out-of-range ids and one expert routed twice,
    and a quantization of the intermediate."""

    def __init__(self, generator, tokens, group, static):
        def uniform(*shape, scale=1.0):
            return (torch.rand(*shape, generator=generator,
                               dtype=torch.float64) * 2 - 1) * scale

        def quantized_weights(values):
            scales = (values.abs().amax(dim=2, keepdim=True).float()
                      / torch.tensor(fp8.E4M3_MAX)).double()
            return fp8.e4m3((values / scales).float()).double() * scales

        self.w13 = quantized_weights(uniform(
            EXPERTS, 2 * INTERMEDIATE, HIDDEN, scale=HIDDEN ** -0.5))
        self.w2 = quantized_weights(uniform(EXPERTS, HIDDEN, INTERMEDIATE,
                                            scale=INTERMEDIATE ** -0.5))
        self.hidden = fp8.bf16(uniform(tokens, HIDDEN))
        self.ids = torch.randint(-1, EXPERTS + 1, (tokens, SLOTS),
                                 generator=generator)
        self.ids[0, 1] = self.ids[0, 0] = 2
        self.weights = torch.rand(tokens, SLOTS, generator=generator)
        self.group = group
        # A static scale that the largest intermediates exceed.
        self.scales = ((None, None) if not static else
                       (torch.tensor([1 / fp8.E4M3_MAX]),
                        torch.tensor([0.08 / fp8.E4M3_MAX])))
        self.intermediate, _ = fp8.experts_reference(
            self.hidden, self.ids, self.weights, EXPERTS,
            self.w13.__getitem__, self.w2.__getitem__, group, self.scales)
        inter = self.intermediate
        self.reference = torch.zeros(tokens, HIDDEN, dtype=torch.float64)
        self.reference.index_add_(0, inter.tokens, torch.einsum(
            "ri,rhi->rh", fp8.Outcomes(inter).reference,
            self.w2[inter.experts]) * inter.weights[:, None])

    def device(self, generator, noise, bug=None, ranks=1):
        """The layer's output as the simulated device computes it, its
        first GEMM's sums off by ``noise`` times their terms' norm (rms),
        with ``bug``; a token's slot rows of one expert alike, as the GPU
        computes them. With ``ranks``, as a tensor-parallel layer: each rank
        sums its share of the intermediate's columns, its slot rows and
        partial output rounded, and the partial outputs are summed."""
        x = fp8.quantized(self.hidden, self.group, self.scales[0])
        output = torch.zeros(ranks, *self.hidden.shape)
        share = INTERMEDIATE // ranks
        intermediates = {}
        routed = (self.ids >= 0) & (self.ids < EXPERTS)
        heaviest = int(torch.where(routed, self.weights, -1.0).argmax())
        for token, slot in zip(*routed.nonzero(as_tuple=True)):
            token, expert = int(token), int(self.ids[token, slot])
            if bug == "slot left out" and token * SLOTS + slot == heaviest:
                continue
            if (token, expert) not in intermediates:
                intermediates[token, expert] = self._intermediate(
                    generator, x[token], expert, noise, bug)
            for rank in range(ranks):
                part = slice(rank * share, (rank + 1) * share)
                output[rank, token] += fp8.bf16(
                    (self.w2[expert][:, part].float()
                     @ intermediates[token, expert][part].float())
                    * self.weights[token, slot])
        output = fp8.bf16(fp8.bf16(output).sum(dim=0)).double()
        if bug == "element 4 % off":
            output[0, 5] += 0.04 * output[0].abs().max()
        elif bug == "token row 3 % off":
            output[-1] *= 1.03
        elif bug == "1.5 % everywhere":
            output *= 1.015
        return output

    def _intermediate(self, generator, x, expert, noise, bug):
        """The device's quantized intermediate (float64 [I]) of one token's
        quantized hidden row ``x`` on ``expert``."""
        w13 = self.w13[expert]
        sums = w13 @ x
        norms = (w13.square() @ x.square()).sqrt()
        sums += noise * norms * torch.randn(sums.shape, generator=generator,
                                            dtype=torch.float64)
        gate, up = sums.float().split(INTERMEDIATE)
        activated = F.silu(gate) * up
        if bug != "no bf16 rounding":
            activated = fp8.bf16(activated)
        values = self._quantized(activated[None], bug)[0]
        if bug == "a column one code off":
            values[COLUMN] = fp8.e4m3(
                (values[COLUMN] / self._scale(activated)).float()
                * 1.2).double() * self._scale(activated)
        return values

    def _quantized(self, values, bug):
        """moe.quantize of float32 ``values`` [1, I] on the device, as
        float64, with ``bug``."""
        if bug == "e4m3 toward zero":
            grouped = values.view(1, -1, self.group or INTERMEDIATE)
            scales = fp8._amax_scale(grouped.abs().amax(dim=2, keepdim=True))
            quotient = grouped / scales
            codes = fp8.e4m3(quotient)
            # Where it rounded away from zero, the neighbour on the other
            # side: the quotient mirrored about itself rounds to it.
            codes = torch.where(codes.abs() > quotient.abs(),
                                fp8.e4m3(2 * quotient - codes), codes)
            return (codes.double() * scales.double()).view(1, -1)
        if bug == "neighbour group's scale":
            grouped = values.view(1, -1, self.group)
            scales = fp8._amax_scale(grouped.abs().amax(dim=2, keepdim=True))
            scales = scales.flip(1)
            return (fp8.e4m3(grouped / scales).double()
                    * scales.double()).view(1, -1)
        return fp8.quantized(values, self.group, self.scales[1])

    def _scale(self, activated):
        """The scale of COLUMN's group of ``activated`` [I] (float64)."""
        if self.scales[1] is not None:
            return self.scales[1].double()
        group = self.group or INTERMEDIATE
        first = COLUMN // group * group
        return fp8._amax_scale(activated[first:first + group].abs().max()
                               ).double()


def cpp_reference(build, layer):
    """The plain C++ reference's output of ``layer`` (its weights as codes
    and per-channel scales), or None without libmoe_reference.so or with
    128-column groups (which it pairs with block weight scales only)."""
    if (layer.group is not None or not os.path.exists(
            os.path.join(build, "lib", "libmoe_reference.so"))):
        return None
    from moe_mlir.testing.reference import Reference

    reference = Reference(build)
    scales = [w.abs().amax(dim=2).float() / fp8.E4M3_MAX
              for w in (layer.w13, layer.w2)]
    codes = [reference.to_e4m3((w / s[..., None].double()).float())
             for w, s in zip((layer.w13, layer.w2), scales)]
    return reference.fused_experts_fp8(
        "channel", BLOCK, "silu", "bf16", layer.hidden, layer.ids,
        layer.weights, codes[0], scales[0], codes[1], scales[1],
        None if layer.scales[0] is None else
        [float(scale) for scale in layer.scales])


def rounding_checks(build, generator, expect_equal):
    """fp8.e4m3 against the plain C++ reference's toE4M3 (where --build has
    libmoe_reference.so) and torch's float8_e4m3fn (torch 2.1 on, beyond
    448 clamped first: it makes NaN of them), bit for bit: every finite
    e4m3 value, the midpoints between neighbours and the floats next to
    them (ties to even), beyond 448, subnormals and random values."""
    codes = torch.arange(127, dtype=torch.uint8)
    values = torch.tensor([float.fromhex(f"0x{m}p{e}") for e in range(-9, 9)
                           for m in ("1.0", "1.2", "1.4", "1.6", "1.8",
                                     "1.a", "1.c", "1.e")])
    points = torch.cat([values, (values[1:] + values[:-1]) / 2,
                        torch.tensor([0.0, 2.0 ** -10, 3 * 2.0 ** -11, 447.0,
                                      448.0, 463.9, 464.0, 480.0, 1e30]),
                        torch.randn(10000, generator=generator) * 10])
    points = torch.cat([points, torch.nextafter(points, points + 1),
                        torch.nextafter(points, points - 1)])
    points = torch.cat([points, -points])
    rounded = fp8.e4m3(points)
    if os.path.exists(os.path.join(build, "lib", "libmoe_reference.so")):
        from moe_mlir.testing.reference import Reference

        reference = Reference(build)
        expect_equal("fp8.e4m3: every e4m3 value's code is its own",
                     reference.to_e4m3(fp8.e4m3(reference.from_e4m3(codes))),
                     codes)
        expect_equal("fp8.e4m3: the C++ reference's toE4M3",
                     rounded, reference.from_e4m3(reference.to_e4m3(points)))
    if hasattr(torch, "float8_e4m3fn"):
        expect_equal("fp8.e4m3: torch's float8_e4m3fn", rounded,
                     points.clamp(-fp8.E4M3_MAX, fp8.E4M3_MAX).to(
                         torch.float8_e4m3fn).float())


def applies(bug, tokens, group, static):
    """Whether ``bug`` is one the check must see in a layer of ``tokens``
    and that quantization."""
    if bug == "neighbour group's scale":
        return group is not None
    if bug == "e4m3 toward zero":
        return not static
    # Its error (a code off where the bf16 rounding moves a value across an
    # e4m3 midpoint, 1 % in norm) has the lawful flips' size and shape: a
    # signal only over many tokens.
    if bug == "no bf16 rounding":
        return not static and tokens >= 64
    # One token's few elements of a column may all be small.
    if bug == "a column one code off":
        return tokens >= 7
    return True


def bits(tensor):
    return tensor.view(torch.int32 if tensor.is_floating_point()
                       else torch.uint8)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(args.seed)
    failed = checked = 0

    def expect(name, result, passed):
        nonlocal failed, checked
        good = result.passed == passed
        checked += 1
        failed += not good
        print(f"{'PASS' if good else 'FAIL'} {name}: "
              f"{'passes' if result.passed else 'fails'}; {result.summary()}",
              flush=True)

    def expect_equal(name, actual, expected):
        """Bit for bit (float32 values or uint8 codes)."""
        nonlocal failed, checked
        differ = int((bits(actual) != bits(expected)).sum())
        checked += 1
        failed += bool(differ)
        print(f"{'FAIL' if differ else 'PASS'} {name}"
              + (f": {differ} differ" if differ else ""), flush=True)

    rounding_checks(args.build, generator, expect_equal)
    for tokens in (1, 7, 64):
        for quantization, group, static in (("groups", BLOCK, False),
                                            ("token", None, False),
                                            ("static", None, True)):
            layer = Layer(generator, tokens, group, static)
            label = f"T={tokens} {quantization}"

            def run(output, layer=layer):
                return fp8.check(output, layer.intermediate,
                                 layer.w2.__getitem__)

            expect(f"{label}: the reference's own output",
                   run(layer.reference), True)
            cpp = cpp_reference(args.build, layer)
            if cpp is not None:
                expect(f"{label}: the C++ reference", run(cpp), True)
            for exponent in (-12, -11):
                expect(f"{label}: device, error 2^{exponent}",
                       run(layer.device(generator, 2.0 ** exponent)), True)
            if group is not None:
                expect(f"{label}: device as two ranks", fp8.check(
                    layer.device(generator, 2.0 ** -12, ranks=2),
                    layer.intermediate, layer.w2.__getitem__, shards=2),
                    True)
            for bug in BUGS:
                if applies(bug, tokens, group, static):
                    expect(f"{label}: device with a bug ({bug})",
                           run(layer.device(generator, 2.0 ** -12, bug)),
                           False)
    print(f"fp8_check_test: {checked - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
