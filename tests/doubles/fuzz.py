"""Shared hypothesis settings and hostile values for the loader fuzz tests (needs the ``test``
extra: hypothesis)."""
from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["FUZZ", "HOSTILE"]

# values a JSON manifest field could be replaced with: wrong types, huge and negative numbers
HOSTILE = st.one_of(st.none(), st.booleans(), st.text(max_size=8),
                    st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.lists(st.integers(-5, 5), max_size=3),
                    st.dictionaries(st.text(max_size=3), st.integers()))
# reproducible runs of bounded length (the fixtures build files once per test function)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
