"""Fixtures of the distributed tests."""
import pytest

from dglx_dist.data import builtin_path
from dglx_dist.partition import partition_dataset


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    """Cora in 2 METIS parts with the default balance constraints, made once per test module
    and the same in every run (the METIS library, seeded; with DGL's call the parts, and the
    accuracy tests' numbers, moved from run to run: S=1 ranged 0.777 to 0.807 over six runs)."""
    out = tmp_path_factory.mktemp("parts") / "cora-metis-2"
    partition_dataset(builtin_path("cora"), out, "metis", 2)
    return out
