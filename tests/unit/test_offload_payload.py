"""The tensor-task payload format: round trips, and clear refusals of damaged payloads."""
import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dglx_dist.offload.tensor_fn.payload import (MAGIC, PayloadError, decode, decode_header,
                                                 encode, replace_header)

DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_]


def _sample():
    return encode({"op": "av", "p": 0.5, "n": 3, "train": True},
                  {"A": np.arange(12, dtype=np.float32).reshape(3, 4),
                   "ids": np.array([5, 6, 7], dtype=np.int64)})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DTYPES),
                          hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)),
                max_size=4),
       st.dictionaries(st.text(min_size=1, max_size=8),
                       st.one_of(st.text(max_size=10), st.integers(-2**62, 2**62),
                                 st.floats(allow_nan=False, allow_infinity=False),
                                 st.booleans()), max_size=4))
def test_round_trip(specs, header):
    rng = np.random.default_rng(len(specs))
    arrays = {f"a{i}": (rng.random(shape) * 100).astype(dtype) for i, (dtype, shape) in
              enumerate(specs)}
    got_header, got = decode(encode(header, arrays))
    assert got_header == header
    assert list(got) == list(arrays)
    for name, arr in arrays.items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
        np.testing.assert_array_equal(got[name], arr)


def test_decoded_arrays_are_views_of_the_buffer():
    buf = _sample()
    _, arrays = decode(buf)
    assert not arrays["A"].flags.writeable  # a view into the immutable bytes, not a copy
    assert arrays["A"].base is not None


def test_non_contiguous_and_big_endian_inputs():
    a = np.arange(20, dtype=">f4").reshape(4, 5)[:, ::2]
    _, got = decode(encode({}, {"a": a}))
    np.testing.assert_array_equal(got["a"], a)
    assert got["a"].dtype == np.dtype("<f4")


def test_replace_header_keeps_arrays():
    buf = replace_header(_sample(), {"op": "av", "seed": 15})
    header, arrays = decode(buf)
    assert header == {"op": "av", "seed": 15}
    assert decode_header(buf) == header
    np.testing.assert_array_equal(arrays["ids"], [5, 6, 7])


@pytest.mark.parametrize("header, match", [
    ({"x": [1, 2]}, "header field 'x': expected str, int, float or bool, got list"),
    ({"x": None}, "got NoneType"),
    ({"x": float("nan")}, "finite"),
])
def test_encode_rejects_non_scalar_headers(header, match):
    with pytest.raises(PayloadError, match=match):
        encode(header, {})


def test_encode_rejects_bad_arrays():
    with pytest.raises(PayloadError, match="dtype complex64 is not supported"):
        encode({}, {"z": np.zeros(2, np.complex64)})
    with pytest.raises(PayloadError, match="expected a numpy array, got list"):
        encode({}, {"z": [1, 2]})
    with pytest.raises(PayloadError, match="expected 1..255 UTF-8 bytes"):
        encode({}, {"x" * 300: np.zeros(1)})
    with pytest.raises(PayloadError, match="at most 8"):
        encode({}, {"z": np.zeros((1,) * 9)})


def test_truncated_payload_names_the_array():
    buf = _sample()
    with pytest.raises(PayloadError, match=r"array 'ids': header declares 24 bytes but 12 "
                                           r"remain \(truncated payload\?\)"):
        decode(buf[:-12])
    for cut in range(0, len(buf) - 24, 7):  # every prefix fails cleanly
        with pytest.raises(PayloadError):
            decode(buf[:cut])


def test_trailing_garbage_and_bad_magic_and_version():
    buf = _sample()
    with pytest.raises(PayloadError, match="3 trailing bytes"):
        decode(buf + b"xyz")
    with pytest.raises(PayloadError, match="magic"):
        decode(b"NOPE" + buf[4:])
    with pytest.raises(PayloadError, match="format version: got 9, expected 1"):
        decode(MAGIC + struct.pack("<H", 9) + buf[6:])
    with pytest.raises(PayloadError, match="expected bytes, got str"):
        decode("DGLX")


def _one_array(code: int, dims: tuple[int, ...], nbytes: int, data: bytes = b"",
               name: bytes = b"A") -> bytes:
    return b"".join([MAGIC, struct.pack("<HI", 1, 2), b"{}", struct.pack("<H", 1),
                     struct.pack("<B", len(name)), name, struct.pack("<BB", code, len(dims)),
                     struct.pack(f"<{len(dims)}Q", *dims), struct.pack("<Q", nbytes), data])


def test_wrong_dtype_code():
    with pytest.raises(PayloadError, match=r"array 'A': dtype code 42 is unknown; expected "
                                           r"one of 1 \(float32\)"):
        decode(_one_array(42, (2,), 8, b"\0" * 8))


def test_shape_nbytes_mismatch():
    with pytest.raises(PayloadError, match=r"array 'A': nbytes is 12 but shape \(2, 2\) of "
                                           r"float32 needs 16"):
        decode(_one_array(1, (2, 2), 12, b"\0" * 12))


def test_too_many_dims_and_duplicate_names():
    with pytest.raises(PayloadError, match="ndim 9, expected at most 8"):
        decode(_one_array(1, (1,) * 9, 4, b"\0" * 4))
    two = encode({}, {"A": np.zeros(1, np.float32), "B": np.zeros(1, np.float32)})
    dup = two.replace(b"\x01B\x01", b"\x01A\x01")
    with pytest.raises(PayloadError, match="'A': name appears twice"):
        decode(dup)


def test_bool_bytes_must_be_0_or_1():
    with pytest.raises(PayloadError, match="bool data holds bytes other than 0 and 1"):
        decode(_one_array(6, (2,), 2, b"\x01\x07"))


def test_huge_declared_sizes_fail_without_allocating():
    dims = (2**30, 2**30)
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError, match="header declares 18446744073709551608 bytes"):
            decode(_one_array(3, (2**61 - 1,), 8 * (2**61 - 1), b"\0" * 16))
        with pytest.raises(PayloadError, match="but 0 remain"):
            decode(_one_array(1, dims, 4 * 2**60))
        with pytest.raises(PayloadError, match="needs 16 bytes but 3 remain"):
            decode(MAGIC + struct.pack("<HI", 1, 2) + b"{}" + struct.pack("<H", 5) + b"\x01A\x01"
                   + b"\x02" + b"\0" * 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_header_must_be_a_json_object_of_scalars():
    raw = b"[1,2]"
    buf = MAGIC + struct.pack("<HI", 1, len(raw)) + raw + struct.pack("<H", 0)
    with pytest.raises(PayloadError, match="expected a JSON object, got list"):
        decode(buf)
    raw = b'{"a": {"b": 1}}'
    buf = MAGIC + struct.pack("<HI", 1, len(raw)) + raw + struct.pack("<H", 0)
    with pytest.raises(PayloadError, match="header field 'a'"):
        decode(buf)
    buf = MAGIC + struct.pack("<HI", 1, 3) + b"{x}" + struct.pack("<H", 0)
    with pytest.raises(PayloadError, match="not valid UTF-8 JSON"):
        decode(buf)
