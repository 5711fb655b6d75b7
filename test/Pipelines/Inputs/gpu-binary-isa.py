"""Writes the assembly (PTX) of the one object of the one gpu.binary in the
MLIR on stdin, as gpu-module-to-binary{format=isa} made it, to stdout, byte
for byte: the text MLIR prints escaped inside the object's string
(llvm::printEscapedString: `\\` for a backslash, `\XX` in hex for quotes
and unprintable bytes). Exits non-zero unless there is exactly one."""

import re
import sys

OBJECT = re.compile(rb'assembly = "((?:[^"\\]|\\.)*)"')
ESCAPE = re.compile(rb"\\(\\|[0-9A-Fa-f]{2})")


def unescape(match):
    code = match.group(1)
    return b"\\" if code == b"\\" else bytes([int(code, 16)])


objects = OBJECT.findall(sys.stdin.buffer.read())
if len(objects) != 1:
    sys.exit(f"gpu-binary-isa.py: expected one assembly object, found "
             f"{len(objects)}")
sys.stdout.buffer.write(ESCAPE.sub(unescape, objects[0]))
