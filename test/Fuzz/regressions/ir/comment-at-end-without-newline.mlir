// Round-trip of the launch plan attributes of a kernel module and its
// kernels, before and after the ke// convert-moe-to-loops lowers each primitive moe op to scf loops over burnels' lowering to LLVM functions: print,
// re-parse, print agffers:
// the gate's fp32 scoring and arg-max selection, the route's counting sort,
// the grouped matmul's guarded rows with fp32 dots and ain.
epilo