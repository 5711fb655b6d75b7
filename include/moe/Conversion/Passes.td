//===- Passes.td - moe conversion passes -------------------*- tablegen -*-===//

#ifndef MOE_CONVERSION_PASSES_TD
#define MOE_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertMoeToLoops : Pass<"convert-moe-to-loops"> {
  let summary = "Lower the primitive moe ops to sequential loops over buffers";
  let description = [{
    Lowers `moe.gate`, `moe.route`, `moe.grouped_matmul` and `moe.combine`
    to `scf.for` loops over memrefs: the CPU path, which defines the reference
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
      rows it never stores are deterministic.
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
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

#endif // MOE_CONVERSION_PASSES_TD
