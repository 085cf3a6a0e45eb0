"""Which strategy, with which options, for a graph, a model and a cluster: ``dglx plan`` and
``--strategy auto`` (docs/choosing.md, "Planning"). A plan reads each registered strategy's
own cost (:class:`~dglx_dist.strategies.cost.Cost`, beside the strategy: its epoch law, its
option chooser, its per-step overhead, its memory fits), prices the epoch with one rank's
unit costs (:mod:`.units`, :mod:`.predict`), estimates its memory per rank from the fit and
what it holds at the plan's widths, and picks the fastest that fits (:mod:`.plan`); a
strategy without a cost is listed as not planned. :mod:`.auto` resolves ``--strategy
auto``."""
from dglx_dist.planner.inputs import (graph_of_dataset, graph_of_directory, graph_of_partitions,
                                   graph_shape)
from dglx_dist.planner.plan import Plan, PlanRow, make_plan
from dglx_dist.planner.units import load_measured
from dglx_dist.strategies.cost.shapes import DEFAULT_CUTS, Cluster, GraphShape, Units, Workload

__all__ = ["DEFAULT_CUTS", "Cluster", "GraphShape", "Plan", "PlanRow", "Units", "Workload",
           "graph_of_dataset", "graph_of_directory", "graph_of_partitions", "graph_shape",
           "load_measured", "make_plan", "plan"]


def plan(graph: GraphShape, work: Workload | None = None, cluster: Cluster | None = None,
         **kwargs) -> Plan:
    """The plan for ``work`` (default: a 2-layer GraphSAGE, hidden 64, fanouts 10,25, 1000
    seeds a rank) on ``graph`` with ``cluster`` (default: one server of one rank, memory not
    checked), with the unit costs cached on this machine, else the defaults
    (:func:`~dglx_dist.planner.plan.make_plan` takes the keywords)."""
    kwargs.setdefault("measured", load_measured())
    return make_plan(graph, work or Workload("sage"), cluster or Cluster(1, 1), **kwargs)
