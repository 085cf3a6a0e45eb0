import dataclasses
from typing import Optional

import pytest

from dglx_dist.cli_flags import parse_key_values
from dglx_dist.partition import PARTITIONERS
from dglx_dist.registry import Bounds, Registry, RegistryError, coerce_option


def _make():
    reg = Registry("widget")

    @reg.register("plain")
    @reg.register("big", size=10)
    class Widget:
        @dataclasses.dataclass(frozen=True)
        class Config:
            size: int = dataclasses.field(default=1, metadata={"help": "how big"})
            names: tuple[str, ...] = ()
            ratio: Optional[float] = dataclasses.field(
                default=None, metadata={"bounds": Bounds(0, 1, low_open=True)})
            flag: bool = False

            def __post_init__(self):
                if self.size < 0:
                    raise ValueError(f"size must be >= 0, got {self.size}")

        def __init__(self, config, name=""):
            self.config, self.registered_name = config, name

    return reg, Widget


def test_build_with_bound_defaults_and_coercion():
    reg, widget = _make()
    assert reg.names() == ["big", "plain"]
    assert reg.build("plain").config.size == 1
    assert reg.build("big").config.size == 10
    w = reg.build("big", size="3", names="a, b", ratio="0.5", flag="yes")
    assert isinstance(w, widget)
    assert w.config == widget.Config(size=3, names=("a", "b"), ratio=0.5, flag=True)
    assert w.registered_name == "big"
    assert reg.build("plain", ratio="none").config.ratio is None
    opts = {o.name: o for o in reg.options("big")}
    assert opts["size"].default == 10 and opts["size"].help == "how big"


def test_unknown_name_lists_valid_names():
    reg, _ = _make()
    with pytest.raises(RegistryError, match=r"unknown widget 'nope'; valid names: big, plain"):
        reg.build("nope")


@pytest.mark.parametrize("options, message", [
    ({"colour": 1}, r"unknown option\(s\) \['colour'\].*valid options: \['flag', 'names'"),
    ({"size": "x"}, r"option 'size': expected int, got 'x'"),
    ({"size": 1.5}, r"expected an integer"),
    ({"flag": "maybe"}, r"expected true/false"),
    ({"size": -1}, r"size must be >= 0, got -1"),
    ({"ratio": "0"}, r"option 'ratio': 0.0; expected a value > 0 and <= 1"),
    ({"ratio": 1.5}, r"option 'ratio': 1.5; expected a value > 0 and <= 1"),
])
def test_bad_options_are_named(options, message):
    reg, _ = _make()
    with pytest.raises(RegistryError, match=message):
        reg.build("plain", **options)


def test_registration_errors():
    reg, widget = _make()
    with pytest.raises(RegistryError, match="already registered"):
        reg.add("plain", widget)

    class NoConfig:
        pass

    with pytest.raises(RegistryError, match="nested dataclass named Config"):
        reg.add("x", NoConfig)
    with pytest.raises(RegistryError, match="not fields"):
        reg.add("y", widget, colour=1)


def test_builtin_partitioners_registered():
    assert {"hash", "metis", "feature_dim"} <= set(PARTITIONERS.names())


def test_coerce_tuple_of_ints():
    assert coerce_option("1,2,3", tuple[int, ...], "x") == (1, 2, 3)
    assert coerce_option((-1, 5), tuple[int, ...], "x") == (-1, 5)
    assert coerce_option(["a ", "b"], tuple[str, ...], "x") == ("a", "b")
    assert coerce_option("", tuple[str, ...], "x") == ()


def test_parse_key_values():
    assert parse_key_values(["a=1", "b-c=x=y"]) == {"a": "1", "b_c": "x=y"}
    with pytest.raises(Exception, match="expected KEY=VALUE"):
        parse_key_values(["novalue"])
    with pytest.raises(Exception, match="given twice"):
        parse_key_values(["a=1", "a=2"])
