"""Exception types. Each message names what was wrong (file, field, value) and what was expected."""
from __future__ import annotations

__all__ = ["DglxError", "DatasetFormatError", "PartitionFormatError", "PartitionError",
           "InsufficientMemoryError", "CheckpointError", "NonFiniteLossError", "DiskFullError"]


class DglxError(Exception):
    """Base class of every error raised on purpose by dglx_dist."""


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


class DiskFullError(DglxError, OSError):
    """A directory could not be written for lack of disk space (the message names where)."""
