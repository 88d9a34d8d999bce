"""`python -m pullback <command>`: small command-line tools.

Commands are entries of `COMMANDS`: a name, a one-line description and a function taking
the remaining arguments and returning an exit status.
"""

import sys


def _demo(argv):
    from .demo import main

    return main(argv)


def _bench(argv):
    from .bench.cli import main

    return main(argv)


COMMANDS = {
    "demo": ("train a small convolutional network on handwritten digits", _demo),
    "bench": ("time gradients against a hand-written NumPy floor and installed peers", _bench),
}


def main(argv=None):
    """Dispatch `argv[0]` to its command.

    >>> main(["--help"])  # doctest: +ELLIPSIS
    usage: python -m pullback <command> [options]
    ...
    0
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: python -m pullback <command> [options]\n\ncommands:")
        for name, (description, _) in COMMANDS.items():
            print(f"  {name:<10} {description}")
        print("\n`python -m pullback <command> --help` describes a command's options.")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return COMMANDS[name][1](rest)


if __name__ == "__main__":
    sys.exit(main())
