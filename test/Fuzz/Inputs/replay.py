"""Runs a command on every file of a directory of fuzzer findings and fails
if any run crashes: dies of a signal (an abort, an assertion, a sanitizer
report with abort_on_error), exits with a status other than 0 or 1 (a
libFuzzer binary's crash), prints a crash report, or runs longer than the
timeout. Exit status 1 with a diagnostic is a rejected input, which is fine.

    replay.py DIRECTORY COMMAND... -- the file's path is appended to COMMAND
"""

import pathlib
import subprocess
import sys

CRASH_MARKERS = (
    "Stack dump:",
    "PLEASE submit a bug report",
    "==ERROR:",
    "runtime error:",
)
TIMEOUT_S = 120


def crashed(command):
    """Why `command` counts as a crash, or None."""
    try:
        run = subprocess.run(command, capture_output=True, text=True,
                             errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no result in {TIMEOUT_S} s"
    output = run.stdout + run.stderr
    marker = next((m for m in CRASH_MARKERS if m in output), None)
    if run.returncode < 0 or run.returncode > 1 or marker:
        return f"exit status {run.returncode}: {output[-2000:]}"
    return None


def main():
    directory, command = pathlib.Path(sys.argv[1]), sys.argv[2:]
    # A fuzzer that never crashed has no directory of findings (git keeps no
    # empty one).
    inputs = sorted(path for path in directory.glob("*") if path.is_file())
    failures = 0
    for path in inputs:
        why = crashed(command + [str(path)])
        print(f"{'CRASH' if why else 'ok'} {path.name}" +
              (f": {why}" if why else ""))
        failures += bool(why)
    print(f"{len(inputs)} inputs, {failures} crashed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
