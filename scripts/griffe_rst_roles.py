"""A griffe extension for the API reference (mkdocs.yml loads it): the docstrings use a few
reStructuredText idioms that Markdown would print literally.

* ``:class:`X```, ``:meth:`~a.b.c```, ... (Sphinx roles) become code spans: `` `X` ``, `` `c` ``
  (a leading ``~`` keeps the last component, as Sphinx does). They are not made into links,
  so a reference to something the reference does not render cannot fail the strict build.
* A line ending in ``::`` (an RST literal block follows) ends in ``:``; the indented block
  after it is already a Markdown code block.

Only the text rendered on the site changes; the code's docstrings stay as they are.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(?m)(\S)::$")


def _role(match: re.Match) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def convert(text: str) -> str:
    """The docstring ``text`` with roles as code spans and ``::`` literal markers as ``:``."""
    return _LITERAL.sub(r"\1:", _ROLE.sub(_role, text))


class RstRoles(griffe.Extension):
    """Rewrites every object's docstring with :func:`convert` as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
