"""CUDA-event timing shared by the benchmarks: medians of single calls with
the L2 cache flushed before each, as bench/RESULTS.md describes."""

import statistics

import torch

# Zeroing this many bytes evicts the H100's 50 MiB L2 several times over.
FLUSH_BYTES = 256 << 20


def flush_buffer(device="cuda"):
    return torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)


def time_us(function, flush, iterations, warm_up_calls=1):
    """Median µs of `iterations` event-timed calls, L2 flushed before each,
    after `warm_up_calls` untimed ones."""
    for _ in range(warm_up_calls):
        function()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    for start, end in zip(starts, ends):
        flush.zero_()
        start.record()
        function()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3
