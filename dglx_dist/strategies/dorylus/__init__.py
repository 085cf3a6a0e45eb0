"""``dorylus``: Dorylus (OSDI'21), its paper's terms and where they live.

* Graph servers and their graph tasks Gather (GA) and Scatter (SC), ghost buffers:
  :mod:`.graph` (:class:`GraphServer`).
* Tensor tasks ApplyVertex (AV), ApplyEdge (AE), their backward and the fused last layer:
  what each layer kind asks for lives with its conv type in :mod:`dglx_dist.convs`
  (``graphconv/``, ``sage/``, ``gat/``: ``dorylus.py`` the stages, ``ops.py`` the numpy
  tasks; the :class:`LayerKind` base in :mod:`dglx_dist.convs.dorylus_base`); the conv's
  adapter names both as objects (its ``dorylus``), and :mod:`.layers` looks the kind up
  in the registry. The tasks run in :mod:`dglx_dist.offload` (``tensor_fn/``), launched by
  the task controller (:class:`~dglx_dist.offload.controller.TaskController`: timeouts,
  relaunches, autotuned number of Lambdas).
* Vertex intervals and bounded pipeline asynchronous computation (staleness S at Gather,
  ``mode``/``staleness``): :mod:`.pipeline` (:class:`Pipeline`).
* Parameter servers with weight stashing, the weight update (WU): :mod:`.params`
  (:class:`ParamServers`, :class:`WeightUpdates`).
* The strategy (setup, training loop, the cost estimate and "value" = 1/(time x cost) in the
  metrics): :mod:`.strategy` (:class:`DorylusStrategy`); its cost for the plan (epoch law,
  overhead, memory fit): :mod:`.cost`.
"""
from dglx_dist.strategies.dorylus.graph import GraphServer
from dglx_dist.convs.dorylus_base import LayerKind, Stage
from dglx_dist.strategies.dorylus.layers import layer_kind
from dglx_dist.strategies.dorylus.params import ParamServers, WeightUpdates
from dglx_dist.strategies.dorylus.pipeline import Pipeline
from dglx_dist.strategies.dorylus.strategy import DorylusStrategy

__all__ = ["DorylusStrategy", "GraphServer", "Pipeline", "ParamServers", "WeightUpdates",
           "LayerKind", "Stage", "layer_kind"]
