"""MXFP4 weights for the GPU tests and benchmarks: random codes and scales
as gpt-oss's checkpoints store them (e2m1 values packed two per byte along
K, the even K index in the low nibble; one e8m0 exponent per 32 values of
K), and their exact values."""

import math

import torch

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
MX_BLOCK = 32


def decode(codes, scales, dtype=torch.float64):
    """The weights [E, N, K] of packed codes [E, N, K/2] (uint8) and e8m0
    scales [E, N, K/32] (uint8): e2m1 value x 2^(scale - 127), exact in
    float64, float32 and bfloat16 (NaN for a scale of 0xFF), an expert at a
    time so that no float64 copy of all experts is held."""
    table = torch.tensor(E2M1, dtype=torch.float64, device=codes.device)
    experts, n, half_k = codes.shape
    values = torch.empty(experts, n, 2 * half_k, dtype=dtype,
                         device=codes.device)
    for expert in range(experts):
        pairs = torch.stack((table[(codes[expert] & 0xF).long()],
                             table[(codes[expert] >> 4).long()]), dim=-1)
        exponent = scales[expert].double() - 127.0
        scale = torch.where(scales[expert] == 0xFF, math.nan,
                            torch.exp2(exponent))
        values[expert] = (pairs.flatten(-2) * scale.repeat_interleave(
            MX_BLOCK, -1)).to(dtype)
    return values


def random_mxfp4(generator, experts, n, k, device="cpu"):
    """Uniform random codes (every e2m1 value, -0 too) and scales around the
    exponent that keeps dot products with uniform [-1, 1) rows of K near 1
    (an e2m1 code's rms is 2.93, K such rows' sqrt(K / 3))."""
    codes = torch.randint(0, 256, (experts, n, k // 2), generator=generator,
                          dtype=torch.uint8, device=device)
    center = 127 - round(math.log2(2.93 * math.sqrt(k / 3)))
    scales = (center + torch.randint(-1, 2, (experts, n, k // MX_BLOCK),
                                     generator=generator, device=device)
              ).to(torch.uint8)
    return codes, scales
