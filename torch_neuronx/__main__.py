"""``python -m torch_neuronx <command>``.

Commands:
  verify   install check: versions, devices, a matmul on neuron against CPU, autoload
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_neuronx",
                                     description="torch_neuronx: the neuron PyTorch device (virtual NeuronCore).")
    parser.add_argument("--version", action="store_true", help="print the package version and exit")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.add_parser("verify", help="install check: versions, devices, a matmul on neuron against CPU, autoload; "
                                  "exit status 0 when everything works",
                   description="Install check: prints versions and devices, runs a matmul (and its gradient) on "
                               "neuron against CPU, checks that a script importing only torch gets the device "
                               "(autoload). Ends with OK (exit 0) or the failed checks and what to do (exit 1).")
    args = parser.parse_args(argv)
    if args.version:
        import torch_neuronx

        print(torch_neuronx.__version__)
        return 0
    if args.command == "verify":
        from .verify import main as verify

        return verify()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
