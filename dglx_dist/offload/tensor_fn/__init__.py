"""Stateless tensor tasks for serverless workers (Dorylus' Lambdas).

This package depends on numpy and the standard library only: it is zipped as the top-level
package ``tensor_fn`` for AWS Lambda (``scripts/package_lambda.py``), and local worker
processes import it with ``dglx_dist/offload`` on ``sys.path``. Keep imports relative and never
import ``dglx_dist`` or torch from here.

Modules:
    payload: the binary request/response format (a JSON header plus raw arrays).
    common: what every task shares (``Op``, the metadata callers need to split rows; checks,
        dropout, activation, loss).
    gcn_ops, gat_ops, sage_ops: the tasks of one layer kind each.
    ops: every task by name (``OPS``).
    handler: ``handle(bytes) -> bytes`` and the AWS Lambda entry point.
    worker: the stdin/stdout loop of a local worker process.

Nothing is imported here on purpose: the worker sets its thread-count environment variables
before numpy is first imported.
"""
__all__: list[str] = []
