"""Expert-parallel layers on GPUs (docs/MULTI-GPU.md).

Rank R of a layer whose E routed experts are split over W ranks holds its
E/W routed experts and every shared expert, and runs the three phases
that moe-expert-parallel splits the layer into, each a bundle of its own
(``moe-compile --expert-parallel W,R --phase <phase>``):

- ``dispatch``: the router over all E experts, then each routed slot's
  token row, weight and slot id stored straight into the receive buffers
  of the rank that holds its expert, and every count of the rank's source
  regions;
- ``experts``: the rank's received rows routed by their counts in the
  grouped matmuls' blocks, both grouped matmuls, and each weighted output
  row stored into the return buffer of its token's rank;
- ``combine``: the sum of the rank's returned rows, slot by slot.

The exchange buffers (``EXCHANGES``) are symmetric: every rank holds one
slice of each, and a bundle stores into all W slices through the peer
table that ``Bundle.bind_peers`` binds. Phase p of a rank may start once
phase p - 1 finished on every rank, which the phases ensure themselves:
the dispatch and the experts phase end by signalling their completion
flags (``FLAGS``, counters that a rank increments in every rank's slice),
and the experts and combine phases begin by waiting, on the GPU, until
every rank has signalled as often as this one. A wait is bounded: past
about 10 s it records the phase and the missing rank in the rank's status
(``RankBundles.status``, which ``check_status`` reports) and lets the phase
run on whatever it has. Nothing is cleared between calls (every count is
written at every call, the flags are zeroed once when allocated and only
ever incremented), and nothing synchronises the host, so a forward is
CUDA-graph capturable.

``simulate_world`` runs all W ranks on one GPU, their slices in one
allocation, phase by phase in the stream's order (so that every wait finds
its flags already set): what the single-GPU tests check the kernels with.
``SymmetricExchange`` allocates the slices in torch's symmetric memory over
a process group, one rank per GPU.
"""

from .layers import layer_bundle
from .runtime import Bundle, Error

#: The phases of an expert-parallel layer, in the order they run.
PHASES = ("dispatch", "experts", "combine")

#: The exchange buffers each phase's bundle takes, in the order it lists
#: them (its inputs, then its outputs): the receive buffers (rows, their
#: routed weights, their slot ids on their source, the rows current in each
#: (local expert, source) region), the return buffer and the completion
#: flags of either exchange.
EXCHANGES = {"dispatch": ("rows", "weights", "slots", "counts",
                          "dispatch_flags"),
             "experts": ("rows", "weights", "slots", "counts",
                         "dispatch_flags", "returned", "combine_flags"),
             "combine": ("returned", "combine_flags")}

#: The completion flags: [W] i32 counters per rank, one per source rank,
#: which must be zero when allocated and are never cleared.
FLAGS = ("dispatch_flags", "combine_flags")

#: The phases whose bundle takes the rank's status, [2] i32, as its last
#: output: each begins with a wait, which records there, past its timeout,
#: [phase, missing rank + 1] with the phase numbered as WAITS numbers it.
WAITS = {1: ("experts", "dispatch"), 2: ("combine", "experts")}


def local_experts(layer, world, rank):
    """The indices, among the whole layer's E + X stored experts, of those
    rank ``rank`` of ``world`` holds, in its order (Layer.expert_slices):
    its E/world routed experts, then every shared expert."""
    return [expert for _, (experts,) in layer.expert_slices(world,
                                                            rank)["w13"]
            for expert in range(experts.start, experts.stop)]


class RankBundles:
    """Rank ``rank``'s three bundles of ``layer`` over ``world`` ranks, at
    ``tokens`` tokens a rank (every rank calls with the same count: it
    sizes the exchange buffers), loaded onto ``device``. The remaining
    keyword arguments go to layer_bundle (cache_dir, config_db, ...)."""

    def __init__(self, layer, world, rank, tokens, dtype="bf16", *,
                 quantization=None, device=None, **bundle_options):
        local_experts(layer, world, rank)
        self.layer, self.world, self.rank = layer, world, rank
        self.tokens = tokens
        self.bundles = {
            phase: Bundle(layer_bundle(
                layer, dtype, quantization=quantization, tokens_max=tokens,
                token_buckets=(tokens,), expert_parallel=(world, rank),
                phase=phase, **bundle_options), device)
            for phase in PHASES}
        for phase, bundle in self.bundles.items():
            ranks = set(bundle.exchanges.values())
            if len(bundle.exchanges) != len(EXCHANGES[phase]) or \
                    ranks != {(world, rank)}:
                raise Error(f"the {phase} bundle's exchange buffers "
                            f"{bundle.exchanges} are not the "
                            f"{len(EXCHANGES[phase])} of rank {rank} of "
                            f"{world}")
        import torch

        #: The rank's status, [2] i32 on its device: [0, 0], or the first
        #: wait that gave up (see WAITS). Only check_status clears it.
        self.status = torch.zeros(
            2, dtype=torch.int32,
            device=f"cuda:{self.bundles['dispatch'].device}")

    def exchange_shapes(self):
        """{name: (dtype name, shape)} of one rank's slice of each exchange
        buffer, as the bundles declare them (they must agree)."""
        shapes = {}
        for phase, bundle in self.bundles.items():
            for name, info in self._exchange_infos(phase):
                shape = (info.dtype, tuple(info.shape))
                if shapes.setdefault(name, shape) != shape:
                    raise Error(f"the phases disagree on exchange buffer "
                                f"{name!r}: {shapes[name]} and {shape}")
        return shapes

    def bind(self, slices):
        """Binds, for each exchange buffer name, its W slices (rank d's at
        index d: torch tensors or device addresses) in every phase's
        bundle. Blocking; before the first forward."""
        for phase, bundle in self.bundles.items():
            for name, info in self._exchange_infos(phase):
                bundle.bind_peers(info.name, slices[name])

    def run(self, phase, tensors, exchange, stream=None):
        """Enqueues ``phase`` on ``stream``: ``tensors`` are its bundle's
        other tensors in order (inputs, then outputs), but for the status,
        which the bundles own; ``exchange`` maps each exchange buffer name
        to this rank's slice."""
        bundle = self.bundles[phase]
        exchanged = dict(self._exchange_infos(phase))
        by_tensor = {info.name: name for name, info in exchanged.items()}
        status = self._status_name(phase)
        others = iter(tensors)
        ordered = []
        for info in bundle.tensors(self.tokens):
            if info.name in by_tensor:
                ordered.append(exchange[by_tensor[info.name]])
            elif info.name == status:
                ordered.append(self.status)
            else:
                ordered.append(next(others, None))
                if ordered[-1] is None:
                    raise Error(f"the {phase} phase takes more tensors than "
                                f"the {len(tensors)} given")
        if next(others, None) is not None:
            raise Error(f"the {phase} phase takes fewer tensors than the "
                        f"{len(tensors)} given")
        bundle.run(self.tokens, ordered, stream)

    def forward(self, hidden_states, logits, weights, output, exchange,
                barrier=None, bias=None, stream=None):
        """This rank's layer: dispatch of ``hidden_states`` routed by
        ``logits`` (and the correction ``bias``), its experts over
        ``weights`` (w13, w2 and any biases and scales, in the layer op's
        order), the combine into ``output``. The phases wait for each other
        through their flags; ``barrier``, if given, is also called between
        them (SymmetricExchange.barrier, say)."""
        routing = [hidden_states, logits] + ([bias] if bias is not None
                                             else [])
        self.run("dispatch", routing, exchange, stream)
        if barrier is not None:
            barrier()
        self.run("experts", list(weights), exchange, stream)
        if barrier is not None:
            barrier()
        self.run("combine", [output], exchange, stream)

    def check_status(self):
        """Raises moe_mlir.Error naming the phase and the rank it gave up
        waiting for if a wait of this rank's runs so far timed out (their
        outputs since are then wrong), and clears the status. Blocking:
        it reads the status after the runs enqueued before it."""
        phase, missing = self.status.tolist()
        if (phase, missing) == (0, 0):
            return
        self.status.zero_()
        waiting, awaited = WAITS.get(phase, (f"phase {phase}", "?"))
        raise Error(f"rank {self.rank} of {self.world}: its {waiting} phase "
                    f"gave up waiting for rank {missing - 1}'s {awaited} "
                    f"phase (about 10 s): the layer's outputs since are "
                    f"wrong")

    def close(self):
        for bundle in self.bundles.values():
            bundle.close()

    def _exchange_infos(self, phase):
        """(exchange name, TensorInfo) of the phase's exchange buffers."""
        bundle = self.bundles[phase]
        infos = [info for info in bundle.tensors(self.tokens)
                 if info.name in bundle.exchanges]
        return list(zip(EXCHANGES[phase], infos))

    def _status_name(self, phase):
        """The name of the phase's status tensor, its last output; None for
        the dispatch, which waits for nothing."""
        if phase == "dispatch":
            return None
        outputs = [info for info in self.bundles[phase].tensors(self.tokens)
                   if info.role == "output"]
        return outputs[-1].name


def allocate_exchange(shapes, world, device):
    """All W ranks' slices of each exchange buffer, for simulate_world:
    {name: [W torch tensors on ``device``]}, the slices of a buffer in one
    allocation, each starting 256-byte aligned (the runtime takes 16-byte
    aligned slices; a slice of W*C f32 weights need not be a multiple of
    16 bytes), the flags zeroed, the others filled with garbage as a
    previous call could leave them: NaN rows and weights, -1 slots and
    counts."""
    import math

    import torch

    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16,
              "f32": torch.float32, "i32": torch.int32}
    buffers = {}
    for name, (dtype, shape) in shapes.items():
        dtype = dtypes[dtype]
        elements = math.prod(shape)
        per_line = 256 // torch.empty((), dtype=dtype).element_size()
        stride = -(-elements // per_line) * per_line
        storage = torch.empty(world, stride, dtype=dtype, device=device)
        if name in FLAGS:
            storage.zero_()
        else:
            storage.fill_(float("nan") if storage.is_floating_point()
                          else -1)
        buffers[name] = [storage[d, :elements].view(shape)
                         for d in range(world)]
    return buffers


def simulate_world(ranks, inputs, weights, outputs, buffers=None,
                   stream=None):
    """Runs the layer of ``ranks`` (the RankBundles of ranks 0 .. W-1, one
    GPU) on one set of exchange buffers, each phase on every rank before
    the next, in the stream's order. ``inputs[r]`` are rank r's hidden
    states, logits (and bias), ``weights[r]`` its experts' weights,
    ``outputs[r]`` its [T, H] output. ``buffers``: the exchange buffers a
    previous call returned, already bound (so that the call can be
    captured in a CUDA graph); None allocates them (allocate_exchange) and
    binds their slices, which blocks. Returns the exchange buffers, {name:
    [W slices]}."""
    world = len(ranks)
    if buffers is None:
        buffers = allocate_exchange(ranks[0].exchange_shapes(), world,
                                    outputs[0].device)
        for bundles in ranks:
            bundles.bind(buffers)
    mine = [{name: slices[r] for name, slices in buffers.items()}
            for r in range(world)]
    for r, bundles in enumerate(ranks):
        bundles.run("dispatch", inputs[r], mine[r], stream)
    for r, bundles in enumerate(ranks):
        bundles.run("experts", weights[r], mine[r], stream)
    for r, bundles in enumerate(ranks):
        bundles.run("combine", [outputs[r]], mine[r], stream)
    return buffers


class SymmetricExchange:
    """One rank's exchange buffers in torch's symmetric memory over the
    process group ``group`` (torch.distributed._symmetric_memory: every
    rank's allocation mapped into its peers' address space, through NVLink
    within a node), one allocation for all of them. ``shapes`` are
    RankBundles.exchange_shapes(); collective and blocking: every rank of
    the group constructs it at once, with the same shapes, and it returns
    once every rank has zeroed its flags (FLAGS), so that no peer's first
    signal can land before the zeroing.

    Before anything is allocated, the ranks compare what they are about to
    allocate (all_gather_object over the group): a rank whose buffers
    differ (another layer, world size or T) or whose ``rank`` (its
    bundles') is not its rank in the group raises moe_mlir.Error on every
    rank, naming it, rather than corrupting a peer's memory.

    ``slices`` ({name: [W device addresses]}) are what RankBundles.bind
    takes, ``mine`` ({name: tensor}) this rank's slices. The phases need no
    barrier between them (their flags order them), but ``barrier()`` gives
    one to callers who want it: it enqueues on the current stream a barrier
    of the group's ranks that no rank passes before every rank reached it,
    with the memory ordering that makes the previous phase's stores into
    peers visible, and gives up after ``timeout_ms`` with a device-side
    error instead of hanging on a missing peer. NVLink multicast stays off
    (MULTICAST_OFF of moe_mlir.testing.distributed must be in the
    environment before torch starts)."""

    #: Alignment of each buffer's slice in the allocation (the runtime
    #: takes 16-byte aligned slices).
    ALIGNMENT = 256

    def __init__(self, shapes, group, device, timeout_ms=10000, rank=None):
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        _check_ranks_agree(group, shapes, rank)

        dtypes = {"bf16": torch.bfloat16, "f16": torch.float16,
                  "f32": torch.float32, "i32": torch.int32}
        layout, total = {}, 0
        for name, (dtype, shape) in sorted(shapes.items()):
            dtype = dtypes[dtype]
            size = torch.Size(shape).numel() * torch.empty(
                (), dtype=dtype).element_size()
            layout[name] = (total, size, dtype, shape)
            total += -(-size // self.ALIGNMENT) * self.ALIGNMENT
        self.storage = symm_mem.empty(total, dtype=torch.uint8, device=device)
        self.handle = symm_mem.rendezvous(self.storage, group.group_name)
        self.timeout_ms = timeout_ms
        pointers = self.handle.buffer_ptrs
        self.slices = {name: [pointer + offset for pointer in pointers]
                       for name, (offset, _, _, _) in layout.items()}
        self.mine = {name: self.storage[offset:offset + size].view(dtype)
                     .view(shape)
                     for name, (offset, size, dtype, shape) in layout.items()}
        with torch.cuda.device(device):
            for name in FLAGS:
                if name in self.mine:
                    self.mine[name].zero_()
            self.barrier()
            torch.cuda.synchronize()

    def barrier(self):
        self.handle.barrier(channel=0, timeout_ms=self.timeout_ms)


def _check_ranks_agree(group, shapes, rank):
    """Raises moe_mlir.Error on every rank of ``group`` unless all of them
    bring the same exchange ``shapes`` and each its own ``rank`` (when
    given)."""
    import torch.distributed as dist

    mine = {"rank": dist.get_rank(group) if rank is None else rank,
            "shapes": sorted((name, dtype, list(shape))
                             for name, (dtype, shape) in shapes.items())}
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    for index, theirs in enumerate(everyone):
        if theirs["rank"] != index:
            raise Error(f"rank {index} of the group runs the bundles of "
                        f"rank {theirs['rank']}: each rank must run its own")
        if theirs["shapes"] != everyone[0]["shapes"]:
            raise Error(f"rank {index} of the group brings exchange buffers "
                        f"{theirs['shapes']}, rank 0 {everyone[0]['shapes']}:"
                        f" every rank must run the same layer, world size "
                        f"and token count")
