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

# The Python package's tests (test/Python) run the interpreter the package
# was built for, with the build's package first on its path; where it was
# not built they are unsupported (test/Python/lit.local.cfg).
python_dir = os.path.join(config.moe_obj_root, "python")
interpreter_file = os.path.join(python_dir, "interpreter.txt")
if os.path.exists(interpreter_file):
    with open(interpreter_file) as file:
        config.substitutions.append(("%python", file.read().strip()))
    config.environment["PYTHONPATH"] = python_dir
    config.available_features.add("python")
