"""``torchrun ... -m dglx_dist.run [--strategy NAME] [options] SCRIPT [ARGS]``: an unmodified
DistDGL script, trained by a dglx_dist strategy.

The script runs as ``__main__`` with ``sys.argv = [SCRIPT, *ARGS]`` (``runpy``), in this
process, with dglx_dist's pieces where a script written against DGL finds DGL's
(:func:`installed`, in this process only): ``dgl.distributed``, the distributed loaders and
torch's ``DistributedDataParallel`` (docs/porting.md has the table of what becomes what).
Bad runner arguments are one line from rank 0 before any process group work; the script's
own errors are reported as without the runner.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import runpy
import sys
import types
from pathlib import Path
from typing import Any, Iterator, Sequence
from unittest import mock

from dglx_dist.cli_flags import add_flags, from_args
from dglx_dist.config import RunConfig, StrategyConfig
from dglx_dist.console import quiet_other_ranks
from dglx_dist.errors import DglxError, InvalidValueError, StateError
from dglx_dist.runtime.env import launch_position
from dglx_dist.runtime.failure import (RankZeroParser, one_line, refused, same_on_every_rank,
                                      tell_launcher)
from dglx_dist.runtime.session import current_session

__all__ = ["RunOptions", "parse", "installed", "main", "plan_lines"]

log = logging.getLogger(__name__)
_SECTIONS = ("strategy", "data")
_SKIP = ("data", "partitions")  # the script names its partitions itself


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What the runner was asked: the strategy (checked by its registry), where imported
    partitions are cached, and the script with its own arguments."""

    strategy: StrategyConfig
    cache_dir: Path
    script: Path
    script_args: tuple[str, ...] = ()

    def graph_options(self) -> dict[str, Any]:
        """The keywords the script's ``DistGraph`` gets."""
        return {"strategy": self.strategy.name, "cache_dir": self.cache_dir,
                **self.strategy.values()}


def build_parser() -> argparse.ArgumentParser:
    p = RankZeroParser(prog="python -m dglx_dist.run", description="run an unmodified DistDGL "
                "script as __main__, trained by a dglx_dist strategy (under torchrun)",
                allow_abbrev=False)
    add_flags(p, RunConfig, sections=_SECTIONS, skip=_SKIP)
    p.add_argument("script", type=Path, help="the DistDGL script, run unchanged as __main__")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def parse(argv: Sequence[str]) -> RunOptions:
    """The runner's arguments, checked (before any process group work).

    Raises:
        DglxError: an unknown strategy or option (the message lists the valid ones), or a
            script that is not a file.
    """
    args = build_parser().parse_args(list(argv))
    config = from_args(RunConfig, args, sections=_SECTIONS, skip=_SKIP)
    strategy = StrategyConfig.of(config.strategy.name, **config.strategy.values())
    if not args.script.is_file():
        raise InvalidValueError(f"script {args.script}: no such file; expected the path of "
                                "a Python script (python -m dglx_dist.run [options] SCRIPT "
                                "[ARGS])")
    return RunOptions(strategy, config.data.cache_dir, args.script, tuple(args.script_args))


def _distributed_module(options: RunOptions, dgl_distributed: types.ModuleType):
    """``dgl.distributed`` as the script sees it under the runner."""
    from dglx_dist.dgl import distributed as ours
    from dglx_dist.dgl.distributed.surface import SERVER_ONLY, server_only

    def DistGraph(graph_name: str, gpb=None, part_config=None, **kwargs: Any):
        return ours.DistGraph(graph_name, gpb, part_config, **{**options.graph_options(),
                                                               **kwargs})

    DistGraph.__doc__ = ours.DistGraph.__doc__

    class Distributed(types.ModuleType):
        def __getattr__(self, name: str):  # what dglx_dist does not define: DGL's own, but
            # its servers and RPC: a stand-in refusing in one line
            return server_only(name) if name in SERVER_ONLY else getattr(dgl_distributed, name)

    module = Distributed("dgl.distributed", ours.__doc__)
    module.__dict__.update({n: getattr(ours, n) for n in ours.__all__})
    module.__dict__.update(DistGraph=DistGraph, __file__=ours.__file__)
    return module


def _ddp_class(real: type) -> type:
    """A stand-in for torch's ``DistributedDataParallel``: calling it parallelizes the model
    over the script's DistGraph."""
    from dglx_dist.api.graph import current_graph
    from dglx_dist.api.parallel import DistModel, parallelize
    from dglx_dist.convs import graph_convs

    class Meta(type):
        def __call__(cls, module, *args: Any, **kwargs: Any):
            if not graph_convs(module):  # e.g. the dense part of an embedding layer: no
                return real(module, *args, **kwargs)  # strategy's business, DDP's all-reduce
            if args or kwargs:
                log.debug("DistributedDataParallel: %s ignored (the strategy %s wraps the "
                          "model)", [*map(repr, args), *kwargs], "dglx_dist.run")
            try:
                g = current_graph()
            except StateError:
                raise same_on_every_rank(StateError(
                    "DistributedDataParallel(model) under dglx_dist.run: the script built no "
                    "dgl.distributed.DistGraph before it; the model is trained over the "
                    "script's DistGraph")) from None
            return parallelize(module, g)

        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, (DistModel, real))

    return Meta("DistributedDataParallel", (), {"__doc__": __doc__, "real": real})


@contextlib.contextmanager
def installed(options: RunOptions) -> Iterator[None]:
    """dglx_dist's pieces in DGL's and torch's places (see the module docstring), restored on
    exit. Imports the modules of dglx_dist that use torch's own DDP first, so that they keep
    it."""
    import dgl
    import dgl.dataloading
    import dgl.distributed
    import torch.nn.parallel

    import dglx_dist.api  # noqa: F401  (holds torch's DDP before it is replaced)
    import dglx_dist.dgl
    import dglx_dist.strategies  # noqa: F401
    from dglx_dist.dgl.distributed import optim
    from dglx_dist.dgl.distributed.dataloader import DistEdgeDataLoader, DistNodeDataLoader

    real_dist = sys.modules["dgl.distributed"]
    module = _distributed_module(options, real_dist)
    places = [(dgl, "distributed", module), (dglx_dist.dgl, "distributed", module),
              (dgl.dataloading, "DistNodeDataLoader", DistNodeDataLoader),
              (dgl.dataloading, "DistEdgeDataLoader", DistEdgeDataLoader),
              (torch.nn.parallel, "DistributedDataParallel",
               _ddp_class(torch.nn.parallel.DistributedDataParallel))]
    entries = {"dgl.distributed": module, "dgl.distributed.optim": optim}
    saved_entries = {k: sys.modules.get(k) for k in entries}
    with contextlib.ExitStack() as stack:
        for obj, name, value in places:
            stack.enter_context(mock.patch.object(obj, name, value))
        try:
            sys.modules.update(entries)
            yield
        finally:
            for k, value in saved_entries.items():
                if value is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = value


class _UnlessConfigured(logging.StreamHandler):
    """stderr, while the script has configured no logging of its own (once it has, the
    records reach its handlers on the root logger instead)."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


@contextlib.contextmanager
def plan_lines() -> Iterator[None]:
    """``--strategy auto``'s two lines (logged by rank 0 at INFO, logger ``dglx_dist.plan``)
    shown on stderr, which a DistDGL script that sets up no logging would not show;
    restored on exit."""
    logger = logging.getLogger("dglx_dist.plan")
    handler, level = _UnlessConfigured(sys.stderr), logger.level
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run(options: RunOptions) -> None:
    """Runs the script as ``__main__`` with its own argv, the pieces installed (and a
    plan's lines shown: :func:`plan_lines`; the package's lines below WARNING from rank 0
    only: :func:`~dglx_dist.console.quiet_other_ranks`)."""
    script = str(options.script)
    sys.argv = [script, *options.script_args]
    sys.path[0] = str(options.script.resolve().parent)  # as `python SCRIPT` sets it
    log.debug("dglx_dist.run: %s under strategy %s", script, options.strategy.name)
    with installed(options), plan_lines(), quiet_other_ranks():
        try:
            runpy.run_path(script, run_name="__main__")
        except (SystemExit, Exception) as exc:
            _tell_of(exc)
            raise


def _tell_of(exc: BaseException) -> None:
    """A script's way out that nobody else reports: ``sys.exit(code)`` with a code other
    than 0 shuts the session down as failed, so that its peers name this rank at once
    instead of waiting out the timeout for a rank that seems to have ended its loop early
    (Python calls no excepthook for ``SystemExit``); an error raised before the script made
    a session (at import, say) goes to torchrun's failure summary (with a session, its
    excepthook decides which rank's line that gets)."""
    try:
        session = current_session()
    except StateError:
        if not isinstance(exc, SystemExit):
            tell_launcher(launch_position()[2], one_line(exc))
        return
    if isinstance(exc, SystemExit) and exc.code not in (None, 0):
        session.shutdown(exc)  # peers: "rank R raised SystemExit: CODE"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dglx_dist.run``: the runner's errors are one line from rank 0 (exit 2)."""
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except DglxError as exc:
        return refused(exc, log, prefix="dglx_dist.run: ")
    try:
        run(options)
    except Exception as exc:  # the script's own error, shown as `python SCRIPT` shows it
        tb = _from_the_script(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        return 1
    return 0


def _from_the_script(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` from the script's first frame on: without the runner's frames (this module's,
    runpy's), which said nothing about the script's error (None for an error in compiling
    it: a ``SyntaxError`` names its line itself)."""
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith("<frozen") or
                              tb.tb_frame.f_code.co_filename == __file__):
        tb = tb.tb_next
    return tb


if __name__ == "__main__":
    sys.exit(main())
