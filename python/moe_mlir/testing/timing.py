"""CUDA-event timing shared by the benchmarks and the tuner: medians of
single calls with the L2 cache flushed before each, as bench/RESULTS.md
describes; calls captured in CUDA graphs; the floor a call is measured
against, and the device's copy bandwidth measured for it."""

import statistics

import torch

# Reading this many bytes evicts the H100's 50 MiB L2 several times over.
FLUSH_BYTES = 256 << 20
BANDWIDTH = 3.0e12  # measured device-to-device copy on the H100, bytes/s
MATH = 720e12       # dense bf16 tensor-core rate to count against, FLOP/s
FP8_MATH = 1450e12  # dense fp8 tensor-core rate to count against, FLOP/s
# Copied to measure a bandwidth: far beyond any L2, long enough (a
# millisecond or more) that a launch's cost is noise.
COPY_BYTES = 1 << 30


class L2Flush:
    """Called before a timed call: evicts the L2 by reading FLUSH_BYTES
    into one sum (`how="read"`), which leaves it holding clean lines that
    the timed call evicts for free. `how="zero"` zeroes them instead, as
    triton.testing does and these benchmarks did before session 18: that
    leaves 50 MiB of dirty lines whose write-back the timed call pays in
    DRAM bandwidth (H100, a 75 MiB read: 43.1 µs after a zeroing, 33.6 µs
    after a reading, 34.1 µs unflushed; bench/RESULTS.md)."""

    def __init__(self, device="cuda", how="read"):
        if how not in ("read", "zero"):
            raise ValueError(f"L2Flush: how is 'read' or 'zero', not {how!r}")
        self.device = torch.device(device)
        self.how = how
        self.buffer = torch.zeros(FLUSH_BYTES // 4, dtype=torch.float32,
                                  device=self.device)
        self.total = torch.empty((), dtype=torch.float32, device=self.device)

    def __call__(self):
        if self.how == "zero":
            self.buffer.zero_()
        else:
            torch.sum(self.buffer, 0, out=self.total)


def time_us(function, flush, iterations, warm_up_calls=1):
    """Median µs of `iterations` event-timed calls, L2 flushed before each,
    after `warm_up_calls` untimed ones."""
    for _ in range(warm_up_calls):
        function()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    for start, end in zip(starts, ends):
        flush()
        start.record()
        function()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def time_interleaved_us(functions, flush, iterations, warm_up_calls=1):
    """{key: median µs} of `iterations` event-timed calls of each of
    `functions` ({key: function}), L2 flushed before each, the calls
    interleaved (a, b, a, b, ...) so that a drift of the clocks over the
    run weighs on every function alike."""
    for function in functions.values():
        for _ in range(warm_up_calls):
            function()
    events = {key: [] for key in functions}
    for _ in range(iterations):
        for key, function in functions.items():
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            flush()
            start.record()
            function()
            end.record()
            events[key].append((start, end))
    torch.cuda.synchronize()
    return {key: statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3
            for key, pairs in events.items()}


def kernel_times_us(function, flush, calls=10):
    """[(kernel name, median µs)] of the kernels one call of `function`
    runs, in launch order, from torch.profiler over `calls` calls, the L2
    flushed before each (the flush's own kernels left out)."""
    activities = [torch.profiler.ProfilerActivity.CUDA]

    def kernels(run, times):
        with torch.profiler.profile(activities=activities) as profile:
            for _ in range(times):
                run()
            torch.cuda.synchronize()
        return sorted((event for event in profile.events()
                       if event.device_type == torch.autograd.DeviceType.CUDA),
                      key=lambda event: event.time_range.start)

    flushing = {event.name for event in kernels(flush, 1)}
    function()
    ours = [event for event in kernels(lambda: (flush(), function()),
                                       calls)
            if event.name not in flushing]
    per_call = len(ours) // calls
    return [(ours[index].name,
             statistics.median(event.time_range.elapsed_us()
                               for event in ours[index::per_call]))
            for index in range(per_call)]


def graphed(function, capture_error_mode="global"):
    """(replay, the output tensor of the captured call). The replay keeps
    `function` alive: the graph reads the tensors its closure holds.
    `capture_error_mode` is torch.cuda.graph's: "thread_local" where other
    threads call into CUDA during the capture, as NCCL's watchdog does
    beside a captured collective."""
    function()  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
        output = function()

    def replay():
        graph.replay()

    replay.captured = function
    return replay, output


def floor_us(bytes_moved, flops=0, bandwidth=BANDWIDTH, math=MATH):
    """The least µs a call can take: max(bytes / bandwidth, flops / math),
    BANDWIDTH and MATH unless given (a measured bandwidth, FP8_MATH)."""
    return max(bytes_moved / bandwidth, flops / math) * 1e6


def device_copy_bandwidth(flush, size=COPY_BYTES, iterations=10):
    """Bytes/s of a copy of `size` bytes within the current GPU, counting
    the bytes read and those written (2 * size), as BANDWIDTH counts: the
    median of `iterations` event-timed copies (time_us, the L2
    flushed before each)."""
    source = torch.empty(size, dtype=torch.uint8, device=flush.device)
    target = torch.empty_like(source)
    us = time_us(lambda: target.copy_(source), flush, iterations)
    return 2 * size / (us * 1e-6)
