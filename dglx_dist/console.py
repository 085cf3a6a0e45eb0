"""What a person sees on the console: the log lines and the progress bar over epochs.

A console for people, records for programs: at the default verbosity the job speaks once,
through rank 0 (a progress bar over epochs on a terminal, the few log lines that matter, each
warning once), while the per-epoch records go as JSON lines to a file or to stdout
(``dglx train --metrics-out`` / ``--json``; :mod:`dglx_dist.report` writes them). ``-v``
brings back the detail: every rank's lines, with the rank, and each epoch's record as
``key=value`` text.

:func:`setup_logging` is what the ``dglx`` command sets up (its handler on stderr, with
:class:`RankZeroFilter` and :class:`OnceFilter`); :class:`EpochBar` is the bar the
:class:`~dglx_dist.trainer.Trainer` and the link task show on rank 0.
"""
from __future__ import annotations

import contextlib
import logging
import re
import sys
from typing import Any, Iterator, TextIO

from tqdm.auto import tqdm

from dglx_dist.runtime.env import launch_position

__all__ = ["RankZeroFilter", "OnceFilter", "console_handler", "setup_logging",
           "quiet_other_ranks", "bar_disable", "EpochBar"]

LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""A log line: when, how grave, who said it, what (with ``-v`` in a job of several ranks,
``[rank R]`` after the level)."""
_NAMES_A_RANK = re.compile(r"\brank\b")
_BAR_METRICS = ("val_acc", "val_auc", "val_mrr")
"""The validation metrics a bar's postfix shows (node classification's; the link task's)."""


class RankZeroFilter(logging.Filter):
    """The job's lines once: on a rank other than 0, only errors and the warnings that name a
    rank (``"rank %d: ..."``, a rank's own news) pass; everything else is the same on every
    rank and rank 0 says it. ``verbose``: every rank's lines pass."""

    def __init__(self, rank: int, verbose: bool = False):
        super().__init__()
        self.rank, self.verbose = rank, verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if self.rank == 0 or self.verbose or record.levelno >= logging.ERROR:
            return True
        return (record.levelno >= logging.WARNING
                and _NAMES_A_RANK.search(str(record.msg)) is not None)


class OnceFilter(logging.Filter):
    """A warning said again in the same words by the same logger (a loop's, a second
    loader's) is shown the first time only."""

    def __init__(self):
        super().__init__()
        self.seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        key = (record.name, record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def console_handler(level: str | int = "INFO", verbose: bool = False,
                    stream: TextIO | None = None, environ=None) -> logging.Handler:
    """The console's handler: ``stream`` (default stderr), :data:`LINE_FORMAT` (``verbose``:
    with the rank), and the filters that make the job speak once (:class:`RankZeroFilter`,
    :class:`OnceFilter`); the rank is the launcher's (``environ``, default the process's)."""
    rank, world, _ = launch_position(environ)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    fmt = LINE_FORMAT
    if verbose and world > 1:  # every rank speaks: which one
        fmt = fmt.replace("%(levelname)s ", f"%(levelname)s [rank {rank}] ")
    handler.setFormatter(logging.Formatter(fmt))
    handler.setLevel(level)
    handler.addFilter(RankZeroFilter(rank, verbose))
    handler.addFilter(OnceFilter())
    return handler


def setup_logging(level: str | int = "INFO", verbose: bool = False) -> None:
    """The ``dglx`` command's logging: :func:`console_handler` on the root logger at
    ``level``, and Python's warnings (a loader's ignored options, say) through it, so that
    they too are said once. Does nothing where logging is configured already (a program
    that calls :func:`dglx_dist.cli.main`, a test's capture), as ``logging.basicConfig``."""
    root = logging.getLogger()
    if root.handlers:
        return
    root.addHandler(console_handler(level, verbose))
    root.setLevel(level)
    logging.captureWarnings(True)


@contextlib.contextmanager
def quiet_other_ranks(environ=None) -> Iterator[None]:
    """Where logging is the program's own (a DistDGL script under ``dglx_dist.run``): on a
    rank other than 0, the package's lines below WARNING are left out while this runs (the
    ``dglx_dist`` logger at WARNING, unless the program set its level), so that a script
    logging at INFO gets the package's news once, from rank 0."""
    logger = logging.getLogger("dglx_dist")
    quiet = launch_position(environ)[0] != 0 and logger.level == logging.NOTSET
    if quiet:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        if quiet:
            logger.setLevel(logging.NOTSET)


def bar_disable(progress: bool) -> bool | None:
    """tqdm's ``disable`` for a bar asked for with ``progress``: None shows it where its
    stream is a terminal only, so a log file or a CI log gets no bar lines."""
    return None if progress else True


def _postfix(record: dict[str, Any], measured: dict[str, Any]) -> dict[str, str]:
    out = {"loss": _number(record.get("loss"), "{:.4f}")}
    out |= {k: _number(v, "{:.4f}") for k, v in measured.items()}
    out["epoch_time"] = _number(record.get("epoch_time"), "{:.3g}s")
    return out


def _number(value: Any, fmt: str) -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else "n/a"


class EpochBar:
    """A progress bar over ``total`` epochs, ``initial`` of them done (a resumed run), on
    rank 0 (where ``show``); its postfix is the last epoch's loss and time and the last
    validation accuracy (or the link task's AUC and MRR) measured, and it stays on the screen when the run ends. Shown only
    where ``file`` (default stderr) is a terminal (:func:`bar_disable`). A context manager."""

    def __init__(self, total: int, show: bool, desc: str = "epochs",
                 file: TextIO | None = None, initial: int = 0):
        self.measured: dict[str, Any] = {}  # the last validation metrics (val_acc, val_auc)
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="epoch",
                        leave=True, disable=bar_disable(show), file=file, dynamic_ncols=True)

    def update(self, record: dict[str, Any]) -> None:
        """One epoch done: ``record`` is its metrics record (``val_acc``, or the link task's
        ``val_auc`` and ``val_mrr``, where measured)."""
        self.measured |= {k: v for k, v in record.items() if k in _BAR_METRICS}
        self.bar.set_postfix(_postfix(record, self.measured), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> EpochBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
