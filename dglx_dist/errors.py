"""Exception types. Each message names what was wrong (file, field, value) and what was expected.

Every exception dglx_dist raises is a :class:`DglxError`. Each also subclasses the builtin a
Python or DGL user would catch for it (a bad value is a ``ValueError``, an unknown name a
``KeyError``), so ``except ValueError`` keeps working. The command line turns any of them into
one line on one rank (see :mod:`dglx_dist.runtime.failure`).
"""
from __future__ import annotations

__all__ = ["DglxError", "InvalidValueError", "InvalidTypeError", "IdOutOfRangeError",
           "UnknownNameError", "StateError", "ProtocolError", "NotSupportedError", "NotServedError",
           "DeadlineError", "MissingDependencyError", "InternalError",
           "DatasetFormatError", "PartitionFormatError", "PartitionError",
           "InsufficientMemoryError", "CheckpointError", "NonFiniteLossError", "OutputExistsError",
           "DiskFullError", "RunFailedError", "LearnedNothingError", "LinkedFileError"]


class DglxError(Exception):
    """Base class of every error raised on purpose by dglx_dist.

    Attributes:
        refused_on: the ranks that refused the same input together (set by the collective
            argument checks, :mod:`dglx_dist.runtime.agree`); the first of them reports it.
        everywhere: raised alike on every rank (a check of data every rank reads the same):
            rank 0 reports it.
        in_session: raised while this rank's session was running (it may be this rank's
            alone): this rank reports it. :func:`dglx_dist.runtime.failure.reporting_rank`
            has the whole rule.
    """

    refused_on: tuple[int, ...] = ()
    everywhere: bool = False
    in_session: bool = False


class InvalidValueError(DglxError, ValueError):
    """An argument, option or tensor outside what is accepted (the message says what is)."""


class InvalidTypeError(DglxError, TypeError):
    """An argument of a type the call does not take."""


class IdOutOfRangeError(DglxError, IndexError):
    """Node, edge, row or part ids outside the range the graph or tensor has."""


class UnknownNameError(DglxError, KeyError):
    """A name nothing is registered under (a tensor, dataset, ndata key, op); the message
    lists the known ones."""

    __str__ = Exception.__str__  # the message itself, not KeyError's quoted repr


class StateError(DglxError, RuntimeError):
    """A call made in the wrong state: no session yet, one already running, a closed
    executor, a step taken out of order."""


class ProtocolError(DglxError, RuntimeError):
    """A peer, worker or file answered something the protocol does not allow (sizes that
    disagree, a request for rows the receiver does not hold)."""


class NotSupportedError(DglxError, NotImplementedError):
    """The chosen strategy or executor has no support for what was asked."""


class NotServedError(NotSupportedError, AttributeError):
    """An attribute the distributed graph does not have (``hasattr`` answers False), asked
    for by a script or a sampler: the message names what it serves instead."""


class DeadlineError(DglxError, TimeoutError):
    """Something the job waited for did not come within its deadline."""


class MissingDependencyError(DglxError, ImportError):
    """An optional dependency is not installed (the message names the extra to install)."""


class InternalError(DglxError, AssertionError):
    """An invariant of dglx_dist itself does not hold: a bug to report, not bad input."""


class DatasetFormatError(DglxError, ValueError):
    """A dataset directory that does not follow the format (see dglx_dist.data.format)."""


class PartitionFormatError(DglxError, ValueError):
    """A partition directory that is missing, damaged or of another format version."""


class PartitionError(DglxError, ValueError):
    """Partitioning cannot run with the given arguments (before anything is written)."""


class InsufficientMemoryError(DglxError, MemoryError):
    """The estimated peak memory of a step exceeds what the machine has available."""


class CheckpointError(DglxError, ValueError):
    """A checkpoint that is missing, damaged, of another format, or from another job shape."""


class NonFiniteLossError(DglxError, FloatingPointError):
    """Training produced a NaN or infinite loss (the run stops unless told to go on)."""


class OutputExistsError(DglxError, FileExistsError):
    """An output directory exists and may not be replaced (the message says why)."""


class LinkedFileError(DglxError, ValueError):
    """A file dglx would create or rewrite in a directory a user named is a link it did not
    make (symbolic, or a hard link with other names) or no regular file: nothing was written
    through it (:mod:`dglx_dist.data.nolinks`)."""


class DiskFullError(DglxError, OSError):
    """A directory (or a shared-memory file system) could not be written for lack of space
    (the message names where)."""


class RunFailedError(DglxError, RuntimeError):
    """A process this one started and waited for (a benchmark's run of a system) failed; the
    message has its exit code and the end of its output where there is one."""


class LearnedNothingError(DglxError, RuntimeError):
    """A run ended with its test metric at chance level, and was asked to fail on that
    (``--fail-on-collapse``)."""
