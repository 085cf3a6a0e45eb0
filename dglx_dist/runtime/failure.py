"""One line per failure: which rank tells the user, and what the launcher is told
(docs/troubleshooting.md has the table of who prints what).

A :class:`~dglx_dist.errors.DglxError` becomes one ``ERROR`` line from the *reporting rank*
(:func:`reporting_rank`): for bad input every rank refused together (``refused_on``, set by
:func:`dglx_dist.runtime.agree.on_every_rank`) the first rank that refused it; for a
:class:`~dglx_dist.runtime.comm.PeerError` the lowest rank it does not name; for what was raised
before the process group existed, or marked :func:`same_on_every_rank`, rank 0; else the rank
it was raised on. Every failing rank also writes the line to torchrun's error file
(``TORCHELASTIC_ERROR_FILE``), which torchrun's closing summary quotes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
import sysconfig
import time
import traceback
from types import TracebackType
from typing import TypeVar

from dglx_dist.errors import DglxError
from dglx_dist.runtime.comm import PeerError
from dglx_dist.runtime.env import launch_position

__all__ = ["RankZeroParser", "reporting_rank", "one_line", "report", "tell_launcher", "mark_in_session",
           "same_on_every_rank", "step_aside", "has_left", "refused"]

LATER_S = 10  # how much later a rank that saw another's failure dates its error file
_LEFT = "dglx/left/{}"  # a store key: the reporting rank of a failure has left
ASIDE_S = 4.0  # how long a rank that does not report a failure waits for the one that does
# (after the reporter said it left: 2 s was seen too short for its interpreter to end on a busy
# machine, and torchrun then stopped it and took the waiting rank's error as the root cause)
D = TypeVar("D", bound=DglxError)
# dglx_dist itself, the standard library and installed packages: not the user's script
_NOT_USER_CODE = tuple({os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        *(sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib"))})


def mark_in_session(exc: BaseException) -> None:
    """Notes that ``exc`` ended a running session (it may be this rank's alone); only a
    :class:`~dglx_dist.errors.DglxError` is reported in one line, so only one is noted."""
    if isinstance(exc, DglxError):
        exc.in_session = True


def same_on_every_rank(exc: D) -> D:
    """Marks ``exc`` as raised alike on every rank (a check of data every rank reads the
    same), so rank 0 alone reports it also inside a running session; returns ``exc``."""
    exc.everywhere = True
    return exc


def reporting_rank(exc: BaseException, rank: int, world_size: int) -> int:
    """The rank that prints ``exc`` (see the module docstring); ``rank`` is the asking rank."""
    if not 0 <= rank < world_size:  # a launch whose RANK is outside its WORLD_SIZE: no rank 0
        return rank  # speaks for this one (it was silent, exit 2)
    if not isinstance(exc, DglxError):
        return 0
    if exc.refused_on:
        return exc.refused_on[0]
    if isinstance(exc, PeerError):
        alive = [r for r in range(world_size) if r not in set(exc.ranks)]
        return alive[0] if alive else rank
    return rank if exc.in_session and not exc.everywhere else 0


def one_line(exc: BaseException) -> str:
    """``Type: message``, with where in the user's own code it was raised when that is known
    (the innermost frame outside dglx_dist)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    failed = list(getattr(exc, "refused_on", ()))
    if len(failed) > 1:
        text += f" (refused on ranks {failed})"
    where = _user_frame(exc.__traceback__)
    return f"{text} (at {where})" if where else text


def _user_frame(tb: TracebackType | None) -> str | None:
    frames = traceback.extract_tb(tb) if tb is not None else []
    outside = [f for f in frames if not f.filename.startswith("<") and
               not os.path.abspath(f.filename).startswith(_NOT_USER_CODE)]
    if not outside:
        return None
    return f"{os.path.basename(outside[-1].filename)}:{outside[-1].lineno}"


def report(exc: BaseException, rank: int, world_size: int, error_file: str | None,
           prefix: str = "") -> str | None:
    """Writes ``exc`` as one line to the launcher's ``error_file`` (every rank) and returns
    that line where this rank is the reporting rank, None where another rank prints it."""
    line = prefix + one_line(exc)
    speaks = reporting_rank(exc, rank, world_size) == rank
    # the rank that failed first is torchrun's root cause (the earliest record): a rank that
    # only saw another's failure dates its record later (the failing rank may write its own
    # a second after: whole seconds, and it may be the slower one)
    tell_launcher(error_file, line, later=isinstance(exc, PeerError) or not speaks)
    return line if speaks else None


def refused(exc: DglxError, log: logging.Logger, prefix: str = "") -> int:
    """A command's refusal before it starts a session: ``exc`` as one line on ``log`` (an
    error) from the reporting rank, the others step aside (:func:`step_aside`); exit status 2."""
    rank, world_size, error_file = launch_position()
    line = report(exc, rank, world_size, error_file, prefix=prefix)
    if line is not None:
        log.error("%s", line)
    else:
        step_aside()
    return 2


def step_aside(store=None, reporter: int | None = None) -> None:
    """Called by a rank that does not report a failure before it exits, so that the
    reporting rank exits first: torchrun's root cause is the earliest dated of the processes
    it has seen fail, and a rank still running when it looks is stopped, not counted. With
    the session's ``store``, waits until rank ``reporter`` has left (:func:`has_left`; at most
    :data:`LATER_S` seconds: a loaded machine may take seconds to tear a process down),
    then :data:`ASIDE_S` for its interpreter to end; without one, :data:`ASIDE_S`."""
    if store is not None and reporter is not None:
        try:
            store.wait([_LEFT.format(reporter)], datetime.timedelta(seconds=LATER_S))
        except Exception:  # noqa: BLE001 - timed out, or the store is gone: as without one
            pass
    time.sleep(ASIDE_S)


def has_left(store, rank: int) -> None:
    """Tells the ranks that :func:`step_aside` that reporting rank ``rank`` is leaving (its
    last act before its process ends)."""
    try:
        store.set(_LEFT.format(rank), "1")
    except Exception:  # noqa: BLE001 - the store is gone: the others wait out their limit
        pass


def tell_launcher(error_file: str | None, message: str, later: bool = False) -> None:
    """Writes ``message`` where torchrun's failure summary reads it (nothing without one);
    ``later``: dated :data:`LATER_S` seconds after now, so that torchrun, which takes the
    earliest record (whole seconds) for the root cause, takes another rank's own failure."""
    if not error_file:
        return
    # the layout torch's own ErrorHandler.record_exception writes; the summary shows
    # py_callstack, which here is the line itself
    record = {"message": {"message": message, "extraInfo": {
        "py_callstack": message, "timestamp": str(int(time.time()) + LATER_S * later)}}}
    try:
        with open(error_file, "w") as fp:
            json.dump(record, fp)
    except OSError:  # the launcher's directory is gone: nothing left to tell it
        pass


class RankZeroParser(argparse.ArgumentParser):
    """argparse whose usage errors rank 0 alone prints: under torchrun every rank parses the
    same command line, and N copies of one usage message help nobody (the launcher is told
    on every rank)."""

    def error(self, message: str):
        rank, world_size, error_file = launch_position()
        tell_launcher(error_file, f"{self.prog}: error: {message}")
        if rank == 0 or not 0 <= rank < world_size:  # (as in reporting_rank)
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        self.exit(2)
