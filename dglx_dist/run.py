"""``torchrun ... -m dglx_dist.run [--strategy NAME] [options] SCRIPT [ARGS]``: the command of
the runner of unmodified DistDGL scripts, which lives behind DGL's door
(:mod:`dglx_dist.dgl.run`); where DGL is not installed, one line says to install it."""
import logging
import sys

from dglx_dist.errors import MissingDependencyError


def _main() -> int:
    try:
        from dglx_dist.dgl.run import main
    except MissingDependencyError as exc:
        from dglx_dist.runtime.failure import refused

        return refused(exc, logging.getLogger("dglx_dist.run"), prefix="dglx_dist.run: ")
    return main()


if __name__ == "__main__":
    sys.exit(_main())
