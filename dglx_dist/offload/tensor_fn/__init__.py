"""Stateless tensor tasks for serverless workers (Dorylus' Lambdas): how they are called.

The tasks themselves live with their conv types (``dglx_dist/convs/<conv>/ops.py``, built on
``dglx_dist/convs/ops_base.py``); this package is the numpy-only machinery around them. It
and the tasks depend on numpy and the standard library only: ``dglx_dist``,
``dglx_dist.offload`` and ``dglx_dist.convs`` import neither torch nor DGL at import time, so
a local worker process imports ``dglx_dist.offload.tensor_fn.worker`` with the directory that
holds ``dglx_dist`` on ``sys.path``, and the Lambda zip (``scripts/package_lambda.py``) holds
these files and the tasks' under the same names. Never import torch or DGL from here.

Modules:
    payload: the binary request/response format (a JSON header plus raw arrays).
    ops: every task by name (``OPS``), gathered from the conv folders.
    handler: ``handle(bytes) -> bytes`` and the AWS Lambda entry point.
    worker: the stdin/stdout loop of a local worker process.

Nothing is imported here on purpose.
"""
__all__: list[str] = []
