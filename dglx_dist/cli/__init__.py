"""The ``dglx`` command: datagen, partition, partitioners, demo, verify, cache, train, plan,
commcheck, rdzvcheck, emulate, bench (one module per group of subcommands:
:mod:`~dglx_dist.cli.data`, :mod:`~dglx_dist.cli.files`, :mod:`~dglx_dist.cli.train`,
:mod:`~dglx_dist.cli.plan`, :mod:`~dglx_dist.cli.cluster`, :mod:`~dglx_dist.cli.bench`).

Results go to stdout (a markdown table and a JSON line); logs and progress bars to stderr
(rank 0's, each warning once; ``-v`` for every rank's detail: :mod:`dglx_dist.console`).
"""
from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys
import threading
from typing import Callable, NoReturn, Sequence

from dglx_dist.cli import bench, cluster, data, files, plan, train
from dglx_dist.console import setup_logging
from dglx_dist.errors import DglxError
from dglx_dist.runtime.env import launch_position, launched
from dglx_dist.runtime.failure import (RankZeroParser, one_line, report, step_aside,
                                       tell_launcher)

__all__ = ["main", "build_parser", "run"]

log = logging.getLogger("dglx_dist.cli")


# name: (help, add the arguments, run), in the order `dglx --help` lists them
_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    **data.COMMANDS, **files.COMMANDS, **train.COMMANDS, **plan.COMMANDS, **cluster.COMMANDS,
    **bench.COMMANDS}


def _add_logging(p: argparse.ArgumentParser, default) -> None:
    """The logging flags, on the command and on each subcommand (``dglx train --debug``)."""
    p.add_argument("-v", "--verbose", "--debug", dest="log_level", action="store_const",
                   const="DEBUG", default=default,
                   help="the detail: every rank's log lines with the time, each epoch's "
                        "metrics as key=value, debug logging and tracebacks of errors "
                        "(= --log-level DEBUG)")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper,
                   default=default, help="logging level (default INFO)")


def build_parser() -> argparse.ArgumentParser:
    parser = RankZeroParser(prog="dglx", description="datasets, partitions and distributed GNN "
                     "training for DGL users (`dglx COMMAND --help` for each command)")
    _add_logging(parser, "INFO")
    _add_commands(parser, _COMMANDS, "command")
    return parser


def _add_commands(parser: argparse.ArgumentParser, commands: dict[str, tuple], dest: str,
                 **kwargs) -> None:
    """A subcommand of ``parser`` per entry of ``commands`` (name: (help, add the arguments,
    run)), each with the logging flags and ``run`` (``dglx data ACTION`` too)."""
    sub = parser.add_subparsers(dest=dest, required=True, **kwargs)
    for name, (help_text, add_args, run) in commands.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        _add_logging(p, argparse.SUPPRESS)  # a subcommand's flag overrides, its absence not
        p.set_defaults(run=run)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one ``dglx`` command. Any error of dglx_dist's own is one ERROR line from one rank
    (:mod:`dglx_dist.runtime.failure`; the traceback too at ``--debug``) and exit status 2;
    the other ranks exit with 2 quietly."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    parser.set_defaults(argv=argv)  # `dglx bench` records its command line
    args = parser.parse_args(argv)
    setup_logging(args.log_level, verbose=args.log_level == "DEBUG")
    unwind = signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
    if unwind:  # a SIGTERM while the command runs unwinds it: its temporaries go
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return args.run(args)
    except SystemExit as exc:
        if unwind and exc.code == TERMINATED and launch_position()[0] == 0:
            log.error("terminated (SIGTERM); what was being written was removed")
        raise
    except KeyboardInterrupt:  # Ctrl-C reaches every rank: one line, from rank 0
        rank, _, error_file = launch_position()
        tell_launcher(error_file, "interrupted (SIGINT)")
        if rank == 0:
            log.error("interrupted (SIGINT); what was being written was removed")
        return 130
    except DglxError as exc:
        rank, world_size, error_file = launch_position()
        line = report(exc, rank, world_size, error_file)
        debug = exc if args.log_level == "DEBUG" else None
        if line is not None:
            log.error("%s", line, exc_info=debug)
        else:
            log.debug("rank %d: %s", rank, one_line(exc), exc_info=debug)
            step_aside()
        return 2
    finally:  # one at exit (torchrun stopping a rank whose peer failed) ends it as the
        if unwind:  # default does: no SystemExit raised inside the interpreter's cleanup
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


TERMINATED = 128 + signal.SIGTERM
"""The exit status of a command ended by SIGTERM (as a shell reports it)."""


def _terminated(signum: int, frame) -> None:
    """SIGTERM: the session's rule (``runtime.session.exit_on_sigterm``: its closers skip
    their barriers, and the command unwinds, its temporaries removed)."""
    from dglx_dist.runtime.session import exit_on_sigterm  # torch's: imported when a job runs

    exit_on_sigterm(signum, frame)


def run() -> NoReturn:
    """The ``dglx`` command (and ``python -m dglx_dist``): :func:`main`, then the process
    ends with its exit status. A launcher's rank ends at once when the command has returned:
    its other threads joined, the atexit handlers run (logging's, a plug-in's) and the output
    flushed, it leaves without the interpreter's finalization, which took 1.5-1.7 s after a
    training run (freeing torch's and DGL's modules and their native state) while torchrun
    waited for the last rank (2 ranks on Cora, 2-core machine)."""
    code = main()
    if launched():
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(int(code or 0))
    sys.exit(code)


if __name__ == "__main__":
    run()
