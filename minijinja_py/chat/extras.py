"""How to install each optional extra, in one table the error messages read.

The extras are the heavy parts imported lazily (the Rust tokenizer, pyarrow, Ray). A user who
calls one without it installed gets one clear error naming the command that installs it. The
command must work however minijinja_py was installed, so it names the packages the extra
pulls in (no package index has minijinja_py, so ``minijinja_py[tokenizers]`` resolves
nowhere) and, for a checkout, the extra itself; ``tests/test_extras.py`` keeps the table
equal to the ``[project.optional-dependencies]`` of the installed distribution.
"""

__all__ = ["EXTRA_REQUIREMENTS", "install_hint"]

#: extra name -> the requirements it installs, as pyproject.toml declares them
EXTRA_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "tokenizers": ("tokenizers>=0.20,<1",),
    "parquet": ("pyarrow>=14",),
    "ray": ("ray[data]>=2.47",),
}


def install_hint(extra: str) -> str:
    """The install command for ``extra``, e.g. ``pip install "tokenizers>=0.20,<1"``.

    It names the packages themselves (which works from an installed wheel and from a checkout)
    and the extra for a checkout (``pip install ".[tokenizers]"`` from its folder).
    """
    packages = " ".join(f'"{requirement}"' for requirement in EXTRA_REQUIREMENTS[extra])
    return f'pip install {packages} (or, from a checkout: pip install ".[{extra}]")'
