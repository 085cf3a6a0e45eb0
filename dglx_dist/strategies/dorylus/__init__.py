"""``dorylus``: Dorylus (OSDI'21), its paper's terms and where they live.

* Graph servers and their graph tasks Gather (GA) and Scatter (SC), ghost buffers:
  :mod:`.graph` (:class:`GraphServer`).
* Tensor tasks ApplyVertex (AV), ApplyEdge (AE), their backward and the fused last layer:
  what each layer kind asks for, :mod:`.layers` (GCN, the :class:`LayerKind` base),
  :mod:`.sage` (GraphSAGE), :mod:`.gat` (GAT); which kind runs a conv type and which tasks
  belong to it is said by the conv's module in :mod:`dglx_dist.convs` (its adapter's
  ``dorylus``). They run in :mod:`dglx_dist.offload`
  (``tensor_fn/``), launched by the task controller
  (:class:`~dglx_dist.offload.controller.TaskController`: timeouts, relaunches, autotuned
  number of Lambdas).
* Vertex intervals and bounded pipeline asynchronous computation (staleness S at Gather,
  ``mode``/``staleness``): :mod:`.pipeline` (:class:`Pipeline`).
* Parameter servers with weight stashing, the weight update (WU): :mod:`.params`
  (:class:`ParamServers`, :class:`WeightUpdates`).
* The strategy (setup, training loop, the cost estimate and "value" = 1/(time x cost) in the
  metrics): :mod:`.strategy` (:class:`DorylusStrategy`).
"""
from dglx_dist.strategies.dorylus.graph import GraphServer
from dglx_dist.strategies.dorylus.layers import LayerKind, Stage, layer_kind
from dglx_dist.strategies.dorylus.params import ParamServers, WeightUpdates
from dglx_dist.strategies.dorylus.pipeline import Pipeline
from dglx_dist.strategies.dorylus.strategy import DorylusStrategy

__all__ = ["DorylusStrategy", "GraphServer", "Pipeline", "ParamServers", "WeightUpdates",
           "LayerKind", "Stage", "layer_kind"]
