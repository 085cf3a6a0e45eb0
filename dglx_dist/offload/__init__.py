"""Offloading tensor tasks to serverless workers (Dorylus' Lambdas).

* :mod:`.tensor_fn`: the numpy-only tasks themselves and their binary payload format; the same
  package runs in local worker processes and, zipped, on AWS Lambda.
* :mod:`.executor`: the :class:`Executor` interface and the :data:`EXECUTORS` registry, with
  the "local" (worker processes), "aws" (boto3) and "inline" (in the calling thread)
  executors.
* :mod:`.controller`: :class:`TaskController`, which times, relaunches and autotunes
  invocations for a graph server.
"""
from dglx_dist.offload.aws import AwsExecutor
from dglx_dist.offload.controller import TaskController, TaskFailedError
from dglx_dist.offload.executor import EXECUTORS, Executor, InvocationError, WorkerLost
from dglx_dist.offload.inline import InlineExecutor
from dglx_dist.offload.local import LocalExecutor
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode

__all__ = ["EXECUTORS", "Executor", "InvocationError", "WorkerLost", "LocalExecutor",
           "AwsExecutor", "InlineExecutor", "TaskController", "TaskFailedError", "OPS",
           "PayloadError", "encode", "decode"]
