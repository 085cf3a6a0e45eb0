"""What keeps a ``GATConv`` from being one shared projection ``fc`` of its input, said once for
P3's column split (:mod:`.adapter`) and dorylus (:mod:`.dorylus`), which both need it."""
from __future__ import annotations

__all__ = ["projection_problems"]


def projection_problems(conv) -> list[str]:
    """What keeps ``conv`` from being one shared projection ``fc`` of its input (empty: it
    is one)."""
    problems = []
    if not hasattr(conv, "fc"):
        problems.append("(src, dst) input sizes: two projections fc_src/fc_dst (build it with "
                        "one int in_feats)")
    if getattr(conv, "res_fc", None) is not None:
        problems.append("residual=True: it adds the input or its own projection of it to the "
                        "output (build it with residual=False)")
    return problems
