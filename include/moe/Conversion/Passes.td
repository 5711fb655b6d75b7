//===- Passes.td - moe conversion passes -------------------*- tablegen -*-===//

#ifndef MOE_CONVERSION_PASSES_TD
#define MOE_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertMoeToLoops : Pass<"convert-moe-to-loops"> {
  let summary = "Lower the primitive moe ops to sequential loops over buffers";
  let description = [{
    Lowers `moe.gate`, `moe.route`, `moe.grouped_matmul`, `moe.quantize`
    and `moe.combine` to `scf.for` loops over memrefs: the CPU path, which defines the reference
    semantics every GPU kernel is checked against. Run `moe-decompose` first
    for `moe.fused_moe`.

    Each op reads its operands through `bufferization.to_buffer` and yields a
    fresh `memref.alloc` through `bufferization.to_tensor` (`restrict
    writable`), so that one-shot bufferization can finish the function around
    it; scratch buffers are plain `memref.alloc`s left to the ownership-based
    buffer deallocation that follows (it rejects existing deallocs). The loops are written for clarity and exactness, not speed:

    * `moe.gate` scores each token in fp32 (softmax: max, `exp(x - max)`,
      sum in expert order, divide; sigmoid: `1 / (1 + exp(-x))`) and picks
      experts by repeated arg-max under the order "larger wins, NaN loses,
      ties go to the lower index", first over groups, then over experts.
    * `moe.route` is a counting sort with per-expert padded offsets.
    * `moe.grouped_matmul` visits the padded rows up to the device count
      (clamped to the capacity), skips padding and rows with an out-of-range
      expert, and accumulates in fp32; its output starts zero-filled so that
      rows it never stores are deterministic. With fp8 operands each K
      block's partial sum (block scales) or the whole sum (channel, tensor)
      is multiplied by its two scales as the op defines, a multiply then an
      add, never fused.
    * `moe.quantize` takes each group's amax and scale (or the given static
      scale, loaded once) and encodes x / scale to e4m3. LLVM has no f8 type (it stores `f8E4M3FN` as i8), so e4m3
      elements are loaded and stored through `arith.bitcast` to i8 and
      converted by integer and f32 arith ops (`MoeCommon/Fp8Math.h`).
    * `moe.combine` sums slot rows in fp32.

    Rows and ids that would index out of bounds (bad routing data) are
    skipped rather than trusted, so malformed inputs cannot write outside an
    output.

    Example:

    ```mlir
    %c = moe.combine %rows : (tensor<?x2x64xf32>) -> tensor<?x64xf32>
    ```

    becomes

    ```mlir
    %rows_buf = bufferization.to_buffer %rows read_only : ...
    %out = memref.alloc(%t) : memref<?x64xf32>
    scf.for %i = %c0 to %t step %c1 {
      scf.for %h = %c0 to %c64 step %c1 {
        %sum = scf.for %s = %c0 to %c2 step %c1 iter_args(%acc = %zero) ... {
          ...
        }
        memref.store %sum, %out[%i, %h] : memref<?x64xf32>
      }
    }
    %c = bufferization.to_tensor %out restrict writable : ...
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def ConvertMoeToGPU : Pass<"convert-moe-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Compile a layer's primitive moe ops into GPU kernels and a launch plan";
  let description = [{
    Turns the function of a layer (its primitive moe ops on tensors, after
    `moe-decompose`) into kernels in a `gpu.module @moe_kernels` and a launch
    plan recorded on them, which `moe-compile` writes out as a bundle
    (docs/BUNDLE.md) once the kernels are lowered to NVVM and serialized.

    * Buffers: the function's arguments become the plan's input tensors
      (`arg0`, `arg1`, ...), its results the output tensors (`result0`, ...),
      and every other value a workspace named after its op. The gpu.module's
      `moe.launch_plan` (`#moe.launch_plan`) lists them with their element
      type and dims, where the dynamic token count is written `T` and
      derived sizes are expressions in T (the route capacity
      `T*S+E*(block_m-1)`, ...), and the TMA descriptors (`moe.tensor_map`)
      the runtime encodes over them.
    * Kernels take one pointer per buffer (the bare-pointer calling
      convention) typed with the shapes at `tokens-max`, a pointer per
      tensor map (listed in `moe.grid_constant_args`, passed by value once
      `moe-grid-constant-tensor-maps` has run), plus T as an i32, and carry
      their launch in `moe.launch` (`#moe.launch`): grid and block sizes,
      dynamic shared memory, and the buffer and tensor map names of their
      arguments.

    The kernels, each a direct transcription of the op's semantics:

    * `moe.gate`: one warp per token. Lane l holds experts l, l+32, ...;
      scores use the routing arithmetic shared with the CPU path
      (RoutingMath.h) and a softmax butterfly whose summation order is the
      one the op defines, so ids are bit-identical to the CPU path. Each
      arg-max is two `redux.sync` (the largest order-preserving 32-bit key
      of the scores, then the lowest expert holding it); grouped routing
      first scores every group by a redux of its top two keys.
    * `moe.route`: three kernels, no host synchronisation: per-block expert
      histograms (shared-memory atomics), one block that scans them into
      stable per-block offsets and padded per-expert offsets and writes the
      block experts and the padding sentinels, and a placement kernel that
      ranks slots within a warp (`match.any` + `popc`) and across warps
      through shared memory, keeping slot order within each expert.
    * `moe.grouped_matmul` in bf16/f16 with 16-byte rows: the tensor-core
      kernel its `#moe.gemm_config` (`moe-tile`) describes, loading through
      its `moe.tensor_map`s (`moe-tma`): one warpgroup per 64 rows of one
      expert x `block_n`
      accumulator columns (gate and up halves side by side when gated),
      blocks in groups of 16 row blocks so resident blocks share weight
      tiles; a ring of `num_stages` 1024-aligned shared-memory stages, one
      mbarrier each, filled by TMA with 128-byte swizzle (weights through
      one 3-D descriptor over [E, N, K] passed by value, sorted rows through
      a 2-D one over [C, K]) or by cp.async gathers of token rows written in
      the same swizzle and fenced for the async proxy; `wgmma.mma_async`
      m64 x `block_n` x k16 with K-major operands from shared-memory
      descriptors, one group in flight while the freed stage is refilled;
      the epilogue on the accumulator registers with paired stores. With
      `split_k` > 1 each split stores fp32 partial sums per routed slot and a
      second kernel adds the splits in order and runs the epilogue. With
      `persistent`, a grid of at most `num-sms` x the blocks that fit on a
      multiprocessor walks all (row block, N tile, split) tiles, counted on
      the device from the padded row count, the ring's phases running on
      across tiles (a warp-specialized producer loads the next tile while
      the consumers run the epilogue).
    * `moe.grouped_matmul` otherwise (f32, or rows that are not 16-byte
      multiples): a shared-memory tiled SIMT kernel, one block per
      `block_m` rows of one expert (blocks past the padded count idle) x 64
      columns, A rows gathered by slot / S or read in sorted order, K in
      steps of 16, fp32 multiply-add per element in K order, the epilogue
      (SiLU/GELU-and-mul, routed weight) on the accumulators, sorted or
      scattered stores; the threads stage both operands. Such ops have no
      `#moe.gemm_config` (`moe-tile` leaves them untiled).
    * `moe.combine`: one thread per 16 bytes of a token's output row, summing
      its slot rows in fp32.
    * `moe.quantize`: warps striding over (row, group of columns) pairs; or
      none, when its input is a grouped matmul's output whose epilogue can
      quantize instead (getEpilogueQuantize): the matmul then writes the
      e4m3 rows and scales, a block's tile spanning a group of columns,
      except at decode `tokens` (every expert streamed for about a row),
      where halving the first GEMM's blocks costs more than the kernel.

    Example:

    ```mlir
    gpu.module @moe_kernels [#nvvm.target<...>] attributes {
        moe.launch_plan = #moe.launch_plan<tokens_max = 16384, buffers = [
            <input "arg0" : f32 ["T", "256"]>, <input "arg1" : f32 ["256"]>,
            <output "result0" : f32 ["T", "9"]>,
            <output "result1" : i32 ["T", "9"]>, ...]>} {
      gpu.func @moe_gate_0(%logits: memref<16384x256xf32>, ...) kernel
          attributes {moe.launch = #moe.launch<grid = ["cdiv(T,4)", "1", "1"],
                      block = [128, 1, 1], smem = 0,
                      args = ["arg0", "arg1", "result0", "result1", i32 "T"]>}
    ```
  }];
  let options = [
    Option<"tokensMax", "tokens-max", "int64_t", /*default=*/"16384",
           "Largest token count the kernels and workspaces are sized for">,
    Option<"tokens", "tokens", "int64_t", /*default=*/"0",
           "Token count the kernels' structure is chosen for, as moe-tile's "
           "and moe-split-k's (0: tokens-max)">,
    Option<"chip", "chip", "std::string",
           /*default=*/"::mlir::moe::kDefaultChip",
           "Target GPU of the kernel module (one the kernels are for: "
           "sm_90a)">,
    Option<"features", "features", "std::string",
           /*default=*/"::mlir::moe::kDefaultFeatures",
           "PTX features of the kernel module: +ptxNN, PTX ISA 8.0 or "
           "later, or empty for the chip's default">,
    Option<"numSMs", "num-sms", "int64_t",
           /*default=*/"::mlir::moe::kDefaultNumSMs",
           "Multiprocessors a persistent kernel's grid is sized for "
           "(default: the H100 SXM's)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    // The launch plan's attributes, when no moe op loaded it.
    "::mlir::moe::MoeDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
}

#endif // MOE_CONVERSION_PASSES_TD
