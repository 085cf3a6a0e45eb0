"""``python -m dglx_dist`` is the ``dglx`` command."""
from dglx_dist.cli import run

run()
