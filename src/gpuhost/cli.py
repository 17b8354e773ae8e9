"""The ``gpuhost`` command line (contract: controls-and-report.md, "Command line")."""
from __future__ import annotations

import argparse
import json
import sys

from . import __version__

EXIT_OK, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 2, 3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 1, as the contract says for bad input
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuhost", description="Audit and repair the system stack under GPU inference servers.")
    p.add_argument("--version", action="version", version=f"gpuhost {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    lab = sub.add_parser("lab", help="simulated GPU hosts from host specs, over real SSH")
    lsub = lab.add_subparsers(dest="lab_command", required=True, parser_class=_Parser)
    lup = lsub.add_parser("up", help="bring up one host per spec; prints the inventory path")
    lup.add_argument("specs", nargs="+", metavar="SPEC")
    lup.add_argument("--dir", help="the lab's directory (default: $GPUHOST_LAB_DIR or ~/.local/state/gpuhost/lab)")
    lst = lsub.add_parser("status", help="the lab's hosts and their state")
    lst.add_argument("--dir")
    lst.add_argument("--json", action="store_true", help="print the status as JSON")
    lrb = lsub.add_parser("reboot", help="reboot one host, as `reboot` inside it would")
    lrb.add_argument("host")
    lrb.add_argument("--dir")
    ldn = lsub.add_parser("down", help="stop every host and remove the lab")
    ldn.add_argument("--dir")
    return p


def run_lab(args: argparse.Namespace) -> int:
    from .lab import manager

    if args.lab_command == "up":
        inventory = manager.up(args.specs, args.dir)
        st = manager.status(args.dir or inventory.parent)
        for name, h in st["hosts"].items():
            print(f"{name:<20} {h['kind']:<10} {h['addr']:<12} {h['state']}  kernel {h.get('kernel') or '-'}")
        print(inventory)
        return EXIT_OK
    if args.lab_command == "status":
        st = manager.status(args.dir)
        if args.json:
            print(json.dumps(st, indent=2))
            return EXIT_OK
        print(f"lab {st['dir']}: {'running' if st['running'] else 'not running'}")
        for name, h in st["hosts"].items():
            print(f"  {name:<20} {h['kind']:<10} {h['addr']:<12} {h['state']:<8} kernel {h.get('kernel') or '-'}"
                  f"  boot_id {h.get('boot_id') or '-'}")
        return EXIT_OK
    if args.lab_command == "reboot":
        h = manager.reboot(args.host, args.dir)
        print(f"{args.host}: up, kernel {h.get('kernel')}, boot_id {h.get('boot_id')}")
        return EXIT_OK
    if args.lab_command == "down":
        manager.down(args.dir)
        return EXIT_OK
    raise UsageError(f"unknown lab command {args.lab_command}")


def main(argv: list[str] | None = None) -> int:
    from .lab.manager import LabError

    try:
        args = build_parser().parse_args(argv)
        if args.command == "lab":
            return run_lab(args)
        raise UsageError(f"gpuhost: unknown command {args.command}")
    except (UsageError, LabError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
