"""The install commands that errors print for the optional extras match the package's metadata."""

from importlib import metadata

import pytest
from packaging.requirements import Requirement

from minijinja_py.chat.extras import EXTRA_REQUIREMENTS, install_hint


def _normal(requirement: str) -> str:
    """One spelling per requirement (metadata reorders the specifiers pyproject wrote)."""
    parsed = Requirement(requirement)
    extras = "[" + ",".join(sorted(parsed.extras)) + "]" if parsed.extras else ""
    return parsed.name + extras + ",".join(sorted(str(s) for s in parsed.specifier))


def _declared_extras() -> dict:
    """extra -> requirements, from the installed distribution's metadata (pyproject.toml's
    [project.optional-dependencies]), markers stripped."""
    declared: dict = {}
    for requirement in metadata.requires("minijinja_py") or ():
        if "extra ==" not in requirement:
            continue
        spec, marker = requirement.split(";", 1)
        extra = marker.split("extra ==", 1)[1].strip().strip("'\"")
        declared.setdefault(extra, set()).add(_normal(spec))
    return declared


@pytest.mark.parametrize("extra", sorted(EXTRA_REQUIREMENTS))
def test_each_hint_installs_what_the_extra_declares(extra: str) -> None:
    declared = _declared_extras()
    assert {_normal(r) for r in EXTRA_REQUIREMENTS[extra]} == declared[extra]
    hint = install_hint(extra)
    for requirement in EXTRA_REQUIREMENTS[extra]:
        assert f'"{requirement}"' in hint
    assert f'pip install ".[{extra}]"' in hint
