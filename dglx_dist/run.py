"""``torchrun ... -m dglx_dist.run [--strategy NAME] [options] SCRIPT [ARGS]``: the command of
the runner of unmodified DistDGL scripts, which lives behind DGL's door
(:mod:`dglx_dist.dgl.run`)."""
import sys

from dglx_dist.dgl.run import main

if __name__ == "__main__":
    sys.exit(main())
