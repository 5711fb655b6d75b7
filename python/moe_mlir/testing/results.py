"""The checks of the GPU tests of the Python modules (test/GPU/python_test,
torch_test, transformers_test) and the command line they share: with
--prepare they compile their bundles into a cache here, where the compiler
is and torch is not; without, they run on the GPU machine and print a PASS
or FAIL line per check. Imports no torch (Results.opcheck does, when
called on the GPU machine)."""

import argparse
import importlib.util
import time


class Results:
    """PASS/FAIL lines and the count of failures."""

    def __init__(self):
        self.failed = 0

    def check(self, name, passed, detail=""):
        print(f"{'PASS' if passed else 'FAIL'} {name}"
              + (f": {detail}" if detail else ""), flush=True)
        self.failed += not passed

    def raises(self, name, kind, call):
        """Checks that `call` raises `kind`, and prints its message."""
        try:
            call()
        except kind as error:
            self.check(name, True, f"{kind.__name__}: {error}")
            return
        except Exception as error:  # noqa: BLE001 - reported as a failure
            self.check(name, False, f"raised {type(error).__name__}: {error}")
            return
        self.check(name, False, f"raised no {kind.__name__}")

    def attempt(self, name, check):
        """Runs ``check`` (returning (passed, detail)) as the check
        ``name``; an exception fails it, with its message (compile and
        export failures say much, so the message is cut)."""
        try:
            passed, detail = check()
        except Exception as error:  # noqa: BLE001 - reported as a failure
            message = str(error)
            if len(message) > 3000:
                message = message[:3000] + " ..."
            self.check(name, False, f"raised {type(error).__name__}: "
                                    f"{message}")
            return
        self.check(name, passed, detail)

    def opcheck(self, name, op, args, **options):
        """Runs ``torch.library.opcheck(op, args, **options)`` as the check
        ``name``: opcheck raises on a failure (reported by ``attempt``) and
        otherwise returns its tests' results, printed as the detail."""
        import torch  # here, not above: --prepare runs without torch

        self.attempt(name, lambda: (True, str(torch.library.opcheck(
            op, args, **options))))

    def raises_with(self, name, module, parameter, data, kind, call):
        """Checks that ``call`` raises ``kind`` while ``module``'s
        ``parameter`` holds ``data`` (a wrong shape or dtype), named by
        ``name`` and the data's shape and dtype; the parameter's own data
        is put back."""
        held = getattr(module, parameter)
        kept = held.data
        held.data = data
        try:
            self.raises(f"{name}: {parameter} {list(data.shape)} "
                        f"{data.dtype}", kind, call)
        finally:
            held.data = kept

    def summary(self, name):
        """Prints `name`'s verdict and returns its exit code."""
        print(f"{name}: " + ("all passed" if not self.failed
                             else f"{self.failed} check(s) failed"))
        return 1 if self.failed else 0


def module_test_main(name, description, cache, prepare, run,
                     add_arguments=None):
    """The main of the GPU test `name`: parses --prepare, --cache (default
    `cache`), --seed and what `add_arguments`(parser) adds; with --prepare
    calls `prepare`(cache) and returns 0, else `run`(results, args) with a
    fresh Results and returns its exit code."""
    parser = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="compile the bundles into --cache (here, "
                             "where the compiler is)")
    parser.add_argument("--cache", default=cache,
                        help="the modules' bundle cache")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.cache)
        return 0
    if importlib.util.find_spec("torch") is None:
        parser.error("torch is needed (all but --prepare run on the GPU)")
    results = Results()
    run(results, args)
    return results.summary(name)
