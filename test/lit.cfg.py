# -*- Python -*-
# lit configuration of the moe-mlir regression tests.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "MOE"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moe_obj_root, "test")
config.excludes = ["CMakeLists.txt", "Inputs", "lit.cfg.py", "lit.site.cfg.py"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    [
        "moe-compile",
        "moe-manifest-fuzzer",
        "moe-opt",
        "moe-run",
        "MoeCpuPathTests",
        "MoeReferenceTests",
        "MoeRuntimeTests",
    ],
    [config.moe_tools_dir, config.llvm_tools_dir],
)

config.substitutions.append(
    ("%moe_src_root", os.path.dirname(config.test_source_root))
)

# gpu-module-to-binary finds libdevice and ptxas through the toolkit path; lit
# does not pass CUDA_HOME through, so tests name it explicitly.
config.substitutions.append(("%cuda_toolkit", config.cuda_toolkit))
if config.enable_runtime:
    config.available_features.add("runtime")
if os.access(os.path.join(config.cuda_toolkit, "bin", "ptxas"), os.X_OK):
    config.available_features.add("ptxas")

# The Python package's tests (test/Python, test/Tools) run
# `config.moe_python`, the interpreter the package was built for, with the
# build's package first on its path: their lit.local.cfg makes it their
# %python, and makes them unsupported where the package was not built. In
# the sanitizer build the extensions are instrumented but, loaded by an
# uninstrumented python, need the ASan runtime preloaded, with the options
# the build's programs have compiled in (cmake/SanitizerOptions.cpp);
# python's own allocations at exit are no leaks of ours.
python_dir = os.path.join(config.moe_obj_root, "python")
interpreter_file = os.path.join(python_dir, "interpreter.txt")
if os.path.exists(interpreter_file):
    with open(interpreter_file) as file:
        config.moe_python = file.read().strip()
    if config.sanitize:
        config.moe_python = (
            f"env LD_PRELOAD={config.asan_runtime} "
            "ASAN_OPTIONS=allow_user_poisoning=0:abort_on_error=1:"
            "allocator_may_return_null=1:detect_leaks=0 "
            "UBSAN_OPTIONS=print_stacktrace=1:abort_on_error=1 "
            + config.moe_python
        )
    config.environment["PYTHONPATH"] = python_dir
    config.available_features.add("python")
