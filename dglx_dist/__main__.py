"""``python -m dglx_dist`` is the ``dglx`` command."""
import sys

from dglx_dist.cli import main

sys.exit(main())
