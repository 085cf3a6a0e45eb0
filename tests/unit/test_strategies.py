"""What every strategy checks before any process group work: partition fit and options."""
import pytest

from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies import STRATEGIES
from dglx_dist.testing import tiny_dataset


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    ds = tiny_dataset(num_nodes=60)
    out = {}
    for method, options in (("metis", {}), ("feature_dim", {"structure": "hash"})):
        out[method] = tmp_path_factory.mktemp("p") / method
        partition_dataset(ds, out[method], method, 2, options)
    return {k: PartitionDir(v) for k, v in out.items()}


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_every_strategy_names_the_partition_it_needs(parts, name):
    strategy = STRATEGIES.build(name)
    topo = Topology(2, 1)
    spec = strategy.partition_spec(topo)
    fits = parts["feature_dim" if spec.method == "feature_dim" else "metis"]
    strategy.check_partitions(fits, topo)
    wrong = parts["metis" if spec.method == "feature_dim" else "feature_dim"]
    if strategy.feature_layout:
        with pytest.raises(ValueError, match=f"needs {strategy.feature_layout}.*--method "
                                             f"{spec.method}"):
            strategy.check_partitions(wrong, topo)
    bigger = strategy.partition_spec(Topology(4, 1)).num_parts
    with pytest.raises(ValueError, match=f"has 2 parts.*needs {bigger}"):
        strategy.check_partitions(fits, Topology(4, 1))
