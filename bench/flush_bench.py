#!/usr/bin/env python3
"""What the L2 flush before a timed call costs the call: reads of 25 MiB
to 700 MiB (a sum of bf16 values, one read pass) timed after each of
timing.L2Flush's ways (reading 256 MiB, zeroing 256 MiB) and with no flush
(a GPU sleep in its place, so that the host's launch stays hidden as a
flush hides it). Prints the median µs of --iterations event-timed calls and
the read bandwidth of each; bench/RESULTS.md ("The L2 flush") says what it
showed."""

import argparse

import torch

from moe_mlir.testing.timing import L2Flush, time_us

SIZES_MIB = (25, 50, 75, 200, 700)


def no_flush():
    torch.cuda._sleep(200000)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=40)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("flush_bench: needs a CUDA GPU")
    flushes = {"read": L2Flush("cuda", "read"), "zero": L2Flush("cuda", "zero"),
               "none": no_flush}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| read MiB | " + " | ".join(f"after {name} µs (TB/s)"
                                      for name in flushes) + " |")
    print("|---:|" + "---:|" * len(flushes))
    for mib in SIZES_MIB:
        values = torch.randn(mib << 19, device="cuda", dtype=torch.bfloat16)
        total = torch.empty((), device="cuda")
        cells = []
        for flush in flushes.values():
            us = time_us(lambda: torch.sum(values, 0, dtype=torch.float32,
                                           out=total), flush, args.iterations)
            cells.append(f"{us:.1f} ({values.numel() * 2 / us * 1e-6:.2f})")
        print(f"| {mib} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
