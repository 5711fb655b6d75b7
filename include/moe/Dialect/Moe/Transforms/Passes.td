//===- Passes.td - moe dialect transformations -------------*- tablegen -*-===//

#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeDecompose : Pass<"moe-decompose"> {
  let summary = "Decompose moe.fused_moe and moe.fused_experts into the "
                "primitive moe ops";
  let description = [{
    Rewrites each `moe.fused_moe` into the five primitive ops that the CPU and
    GPU lowerings consume: the router (`moe.gate`), the alignment of routed
    slots to `block-m`-row blocks (`moe.route`), the first grouped matmul
    (gathering token rows, `w13`, gated activation, sorted output), the second
    grouped matmul (sorted rows, `w2`, multiplied by the routed weight,
    scattered to slot order) and the per-token sum (`moe.combine`).

    The routed weights are applied in the second GEMM's epilogue rather than
    in `moe.combine` so that the slot rows are final when stored, as the fused
    kernels of SGLang and vLLM do. The intermediate activations keep the
    element type of the hidden states.

    Before:

    ```mlir
    %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
           {router = #moe.router<scoring = softmax, top_k = 2>}
         : (tensor<?x64xbf16>, tensor<?x8xf32>, tensor<8x256x64xbf16>,
            tensor<8x64x128xbf16>) -> tensor<?x64xbf16>
    ```

    After (types elided):

    ```mlir
    %w, %ids = moe.gate %logits {router = #moe.router<...>}
    %sorted, %experts, %count = moe.route %ids {block_m = 64, num_experts = 8}
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           input(token) output(sorted) activation(silu_and_mul) {...}
    %o = moe.grouped_matmul %h, %w2, %sorted, %experts, %count
           routed_weights(%w) input(sorted) output(slot) {...}
    %y = moe.combine %o
    ```

    A `moe.fused_experts` becomes the same without the gate: its ids and
    weights feed `moe.route` and the second GEMM, and the combine takes the
    ids (`ids(%ids) {num_experts = E}`) to skip the slots whose ids are out
    of range, which the routing gave no row.

    A layer with a `#moe.quantization` (fp8 weights) gets a `moe.quantize`
    before each GEMM: of the hidden states, and of the activation's output
    over the padded rows (`rows(%count)`), each with one scale per
    `token_group` of `block_size` columns or per row; static activation
    scales (`input_scales(%a13, %a2)`) become the quantizes' `scale(%a13)`
    and `scale(%a2)`. The scales ride to the GEMMs as their `scales(...)`.
  }];
  let dependentDialects = ["::mlir::moe::MoeDialect"];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"64",
           "Rows per routing block: every expert's rows are padded to a "
           "multiple of it (the GEMMs' M tile); 0 chooses it for `tokens` "
           "(128 once the experts average 64 rows, else 64)">,
    Option<"tokens", "tokens", "int64_t", /*default=*/"4096",
           "The token count block-m=0 chooses for">
  ];
}

def MoeExpertParallel : Pass<"moe-expert-parallel", "::mlir::ModuleOp"> {
  let summary = "Split an expert-parallel layer into the phases between its "
                "exchanges";
  let description = [{
    Rewrites each function that computes one expert-parallel `moe.fused_moe`
    (`#moe.expert_parallel<world = W, rank = R>`; the function's arguments
    are the layer's operands and it returns the layer) into rank R's three
    phases, each a function, between which the ranks exchange rows through
    buffers that every rank can write (on GPUs, one slice per rank):

    1. `@f_dispatch(hidden, logits[, bias], rows, weights, slots, counts,
       dispatch_flags)`: `moe.gate` over all E experts, then
       `moe.ep_dispatch` of each routed slot's token row into the receive
       buffer of the rank holding its expert (shared experts: the rank's
       own), then `moe.ep_signal` of the dispatch's flags;
    2. `@f_experts(w13, w2[, biases][, scales][, input scales], rows,
       weights, slots, counts, returned, dispatch_flags, combine_flags,
       status)`: `moe.ep_wait` until every rank's dispatch signalled,
       guarding the receive buffers; `moe.ep_route` of the rank's receive
       buffer (each local expert's current rows in routing blocks of
       `block-m` rows), the layer's two grouped matmuls over its
       L = E/W + X local experts reading the received rows in place (one
       slot per row) in those blocks, `moe.ep_combine` of each weighted
       output row into the return buffer of its token's rank, at its slot,
       and `moe.ep_signal` of the combine's flags;
    3. `@f_combine(returned, combine_flags, status)`: `moe.ep_wait` until
       every rank's experts phase signalled, guarding the return buffer,
       then `moe.combine` of the rank's returned rows, in slot order.

    The buffers are function arguments and results (the phase's writes),
    `[W, ...]`: every rank's, as `moe.ep_dispatch`, `moe.ep_combine` and
    the completion ops define them, with C = T rows per (local expert,
    source rank). Each such argument is marked `moe.exchange =
    #moe.expert_parallel<...>`: on a GPU the rank holds one slice of it,
    and its kernels reach the other ranks' slices through a peer table
    (convert-moe-to-gpu). The status, `[2] i32`, is the rank's own and not
    marked: the first wait that gave up records its phase and the missing
    rank there. Phase p of any rank may run once phase p - 1 has run on
    every rank, which the flags ensure: on one host, where a test runs
    each phase for ranks 0 .. W-1 on the same buffers, the waits only
    check; on GPUs, where each phase is a bundle of its own, they spin
    (docs/MULTI-GPU.md, "Completion"). Nothing is cleared between calls,
    since every count is written at every call and the flags count the
    calls. Each row gets the
    arithmetic it gets in the single-device layer, and the final sum runs
    in slot order, so every rank's result is its tokens' rows of the
    single-device layer, bit for bit.

    Splitting into functions, rather than a collective op inside one, keeps
    each phase's semantics local to one rank's writes: a tensor result can
    say "the buffers after my writes", not "after everyone's".

    Before:

    ```mlir
    func.func @f(%x: tensor<4x64xbf16>, %logits: tensor<4x8xf32>,
                 %w13: tensor<5x256x64xbf16>, %w2: tensor<5x64x128xbf16>)
        -> tensor<4x64xbf16> {
      %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
             {router = #moe.router<scoring = softmax, top_k = 2,
                                   num_shared_experts = 1>,
              expert_parallel = #moe.expert_parallel<world = 2, rank = 0>}
           : (...) -> tensor<4x64xbf16>
      return %y : tensor<4x64xbf16>
    }
    ```

    After (types elided):

    ```mlir
    func.func @f_dispatch(%x, %logits, %rows, %weights, %slots, %counts,
                          %dispatch_flags) {
      %w, %ids = moe.gate %logits {router = ...}
      %0:4 = moe.ep_dispatch %x, %ids, %w
               into(%rows, %weights, %slots, %counts) {...}
      %f = moe.ep_signal into(%dispatch_flags) {...}
      return %0#0, %0#1, %0#2, %0#3, %f
    }
    func.func @f_experts(%w13, %w2, %rows, %weights, %slots, %counts,
                         %returned, %dispatch_flags, %combine_flags,
                         %status) {
      %s, %ready:4 = moe.ep_wait %dispatch_flags into(%status)
                       guards(%rows, %weights, %slots, %counts) {phase = 1}
      %sorted, %experts, %n = moe.ep_route %my_counts {block_m = 64}
      %h = moe.grouped_matmul %my_rows, %w13, %sorted, %experts, %n
             input(token) output(sorted) activation(silu_and_mul)
             {block_m = 64, num_slots = 1}
      %o = moe.grouped_matmul %h, %w2, %sorted, %experts, %n
             routed_weights(%my_weights) input(sorted) output(slot) {...}
      %r = moe.ep_combine %o_rows, %my_slots, %my_counts into(%returned)
      %f = moe.ep_signal into(%combine_flags) {...}
      return %r, %f, %s
    }
    func.func @f_combine(%returned, %combine_flags, %status) {
      %s, %ready = moe.ep_wait %combine_flags into(%status)
                     guards(%returned) {phase = 2}
      %y = moe.combine %my_returned
      return %y, %s
    }
    ```

    where `%my_...` are rank 0's parts of the waited buffers
    (`tensor.extract_slice` of `%ready`).

    The routing block is the GEMMs' M tile, as `moe-decompose`'s: the GPU
    kernels take 16 to 128 rows; 1, which pads nothing, suits the CPU path.
    Chosen (`block-m = 0`), it is the block of the single-device layer of
    the W ranks' T*W tokens, whose routed experts receive as many rows on
    average as a rank's do.

    With `phase` (`dispatch`, `experts` or `combine`) only that phase's
    function is kept: a GPU bundle compiles one phase (`moe-compile
    --phase`), since the ranks exchange rows between phases.
  }];
  let dependentDialects = ["::mlir::moe::MoeDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"0",
           "Rows per routing block of the experts phase: each local "
           "expert's current rows are padded to a multiple of it (the "
           "GEMMs' M tile); 0 chooses it as moe-decompose does for the "
           "T*W tokens of all ranks">,
    Option<"phase", "phase", "std::string", /*default=*/"\"\"",
           "The one phase to keep (dispatch, experts or combine); all three "
           "when empty">
  ];
}

def MoeTile : Pass<"moe-tile"> {
  let summary = "Choose the tile configuration of every grouped matmul";
  let description = [{
    Gives each `moe.grouped_matmul` without a `config` the `#moe.gemm_config`
    its GPU kernel is built from: the block of padded rows (the routing
    `block_m`) x `block_n` accumulator columns x `block_k` reduction
    elements, the depth of the shared-memory ring, the warpgroups, the K
    splits and which operands load through TMA (`moe-tma` then makes their
    descriptors). `convert-moe-to-gpu` materializes the grid (row blocks x N
    tiles x K splits) and the K loop of tile loads and wgmmas from it. An op that already has a config (written
    by hand or by the tuner) keeps it, and one the tensor-core kernel cannot
    run (f32, rows not a multiple of 16 bytes, a routing `block_m` that is not
    a power of two in [16, 256]) is left untiled, to the SIMT kernel.

    Tuned configs come first: the entries of `config-db` (a database written
    by `moe-tune`, docs/CONFIG-DATABASE.md), then those shipped with moe-mlir
    (configs/gemm-configs.json, compiled in), keyed by the weights' E, N, K
    and element type, the CUDA `device` name and the token bucket nearest
    `tokens`. A tuned config is final: the op gets the `moe.tuned` unit
    attribute and `moe-split-k` leaves its `split_k` alone. An entry whose
    config is `"heuristic"` (moe-tune measured the heuristic fastest at its
    bucket) gives the heuristic's config, not final and without a warning,
    where the bucket would otherwise take a neighbour's entry. A shape with
    no entry gets the heuristic, and the pass says so once per shape on
    stderr (a warning): no fallback is silent.

    The heuristic sizes for `tokens` tokens: 128-byte K tiles (the swizzle
    span), 128 accumulator columns below 256 tokens and 256 from there on,
    two warpgroups (128-row tiles) when the routing blocks have 128 rows or
    more, TMA for sorted rows and cp.async gathers for token rows, issued by
    a producer warpgroup from 256 tokens on (bf16/f16), and four stages but
    three while the weights stream at about a row per expert and for two
    warpgroups fed by a producer without a persistent grid. While the weights stream, a gated GEMM
    whose 128-column tiles would leave some of the `num-sms`
    multiprocessors without a block gets 64-column tiles, a producer and
    six stages.
    From 1024 tokens, a bf16/f16 GEMM of at most 128 experts whose producer
    gathers token rows runs a persistent grid (what moe-tune found on the
    H100, bench/RESULTS.md), and so does a bf16/f16 GEMM without a producer
    of at least 128 K tiles whose tiles fill one to six rounds of the
    `num-sms` multiprocessors, with its last round split along K
    (`stream_k`).
    `block-n` and `num-stages` override its choices (how moe-compile tries
    other configurations by hand); the result is verified like any
    #moe.gemm_config.

    Before:

    ```mlir
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           input(token) output(sorted) activation(silu_and_mul)
           {block_m = 64 : i64, num_slots = 2 : i64} : ...
    ```

    After:

    ```mlir
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           input(token) output(sorted) activation(silu_and_mul)
           {block_m = 64 : i64, num_slots = 2 : i64,
            config = #moe.gemm_config<block_m = 64, block_n = 256,
                                      block_k = 64, num_stages = 4,
                                      warp_specialized = true>} : ...
    ```
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", /*default=*/"4096",
           "The token count the configurations are chosen for">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"0",
           "Accumulator columns per block instead of the heuristic's (0: "
           "the heuristic's)">,
    Option<"numStages", "num-stages", "int64_t", /*default=*/"0",
           "Shared-memory stages instead of the heuristic's (0: the "
           "heuristic's)">,
    Option<"numSMs", "num-sms", "int64_t",
           /*default=*/"::mlir::moe::kDefaultNumSMs",
           "Multiprocessors the heuristic's decode tiles fill (default: the "
           "H100 SXM's)">,
    Option<"configDatabase", "config-db", "std::string", /*default=*/"",
           "A tuned config database (JSON, docs/CONFIG-DATABASE.md) whose "
           "entries come before the shipped ones">,
    Option<"device", "device", "std::string",
           /*default=*/"::mlir::moe::kDefaultDeviceName",
           "The CUDA device name the tuned configs are looked up for "
           "(default: the H100 SXM's)">
  ];
}

def MoeSplitK : Pass<"moe-split-k"> {
  let summary = "Split the K loop of grouped matmuls that cannot fill the GPU";
  let description = [{
    For each `moe.grouped_matmul` with a `#moe.gemm_config` (see `moe-tile`)
    whose tiles at `tokens` tokens (row blocks of the experts that get rows
    x N tiles) are at most half the GPU's `num-sms` multiprocessors, as in
    decode, sets `split_k` so that the splits fill them, keeping at least
    `num_stages` K tiles and 1 MiB of weights per split. `convert-moe-to-gpu` then adds the split
    index to the grid, has each split store fp32 partial sums per routed
    slot into a workspace it owns (overwritten whole, so nothing is zeroed),
    and runs the epilogue (activation, routed weight, store) in a second
    kernel after adding the splits in order: the result does not depend on
    scheduling. A config whose `split_k` is already above 1, and a tuned one
    (an op with the `moe.tuned` attribute, see `moe-tile`), is kept.

    Before (Mixtral-8x7B's second GEMM, K = 14336, 1 token: 2 experts x 32
    N tiles):

    ```mlir
    config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64,
                              num_stages = 4, tma_a = true>
    ```

    After (`--moe-split-k="tokens=1"`):

    ```mlir
    config = #moe.gemm_config<block_m = 64, block_n = 128, block_k = 64,
                              num_stages = 4, split_k = 3, tma_a = true>
    ```
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", /*default=*/"4096",
           "The token count the splits are chosen for">,
    Option<"numSMs", "num-sms", "int64_t",
           /*default=*/"::mlir::moe::kDefaultNumSMs",
           "Multiprocessors to fill (default: the H100 SXM's)">
  ];
}

def MoeTma : Pass<"moe-tma"> {
  let summary = "Create the TMA descriptors of the grouped matmuls' tile loads";
  let description = [{
    For each `moe.grouped_matmul` whose `#moe.gemm_config` (see `moe-tile`)
    loads an operand by TMA, makes that operand's `moe.tensor_map` and passes
    it to the op (`weights_map`, `input_map`): weight tiles through one 3-D
    map over `[E, N, K]` whose outer coordinate is the expert (boxes of one
    expert x the tile's rows of N x block_k), and, with `tma_a`, sorted input
    rows (the second GEMM reads the first one's sorted output) through a 2-D
    map over `[C, K]`; gathered token rows stay cp.async loads. The swizzle
    spans one K tile of a row, as the wgmma operands read it. A tensor gets
    one map per box shape, placed where the tensor is defined, so the runtime
    encodes it once on the host, never per tile or per expert; kernels take
    it by value (`moe-grid-constant-tensor-maps`). Ops that already have
    their maps are kept.

    Before:

    ```mlir
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           input(token) output(sorted) activation(silu_and_mul)
           {config = #moe.gemm_config<block_m = 64, block_n = 128,
                                      block_k = 64, num_stages = 4>, ...}
    ```

    After:

    ```mlir
    %map = moe.tensor_map %w13 : tensor<8x28672x4096xbf16>
             -> !moe.tensor_map<bf16, box = [1, 64, 64], swizzle = 128>
    %h = moe.grouped_matmul %x, %w13, %sorted, %experts, %count
           weights_map(%map) input(token) output(sorted)
           activation(silu_and_mul) {config = ..., ...}
    ```
  }];
}

def MoeGridConstantTensorMaps
    : Pass<"moe-grid-constant-tensor-maps", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Pass TMA descriptors to kernels by value, as grid constants";
  let description = [{
    A kernel built by the moe lowerings names, in its
    `moe.grid_constant_args` attribute, the arguments that carry a TMA
    descriptor (a 128-byte `CUtensorMap` that the runtime builds on the
    host). This pass runs on the
    LLVM-dialect kernels after `convert-gpu-to-nvvm` and turns each of those
    arguments into a by-value parameter in the parameter space, CUDA's
    `__grid_constant__ const CUtensorMap`: `llvm.byval` of 128 bytes, 64-byte
    aligned, with `nvvm.grid_constant`, so the TMA instructions read the
    descriptor straight from the launch parameters (no global-memory copy, no
    per-launch upload). It runs late because upstream rejects
    `nvvm.grid_constant` on `gpu.func` arguments and drops `llvm.byval` when
    lowering `gpu.func` to `llvm.func`. The pointer-typed argument keeps its
    uses; the NVPTX backend takes the descriptor's address with `cvta.param`.

    Before:

    ```mlir
    llvm.func @gemm(%map: !llvm.ptr, %out: !llvm.ptr)
        attributes {gpu.kernel, nvvm.kernel,
                    moe.grid_constant_args = array<i64: 0>}
    ```

    After:

    ```mlir
    llvm.func @gemm(%map: !llvm.ptr {llvm.align = 64 : i64,
                                     llvm.byval = !llvm.array<128 x i8>,
                                     nvvm.grid_constant},
                    %out: !llvm.ptr) attributes {gpu.kernel, nvvm.kernel}
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect",
                           "::mlir::moe::MoeDialect",
                           "::mlir::NVVM::NVVMDialect"];
}

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
