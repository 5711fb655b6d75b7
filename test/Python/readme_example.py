# RUN: %python %s %moe_src_root/README.md | FileCheck %s
"""The README's Python example, run from the README itself so that the two
cannot drift apart."""

import re
import sys

with open(sys.argv[1]) as file:
    readme = file.read()
section = readme[readme.index("\n## Python\n"):]
example = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
exec(compile(example, "README.md", "exec"))
# CHECK: (4, 128) float32
