"""The grammar file is the source of truth: the shipped LALR tables are exactly what Lark
compiles from it, and the table driver builds the same AST as Lark's own LALR parser."""

from __future__ import annotations

from pathlib import Path

import pytest

import minijinja_py as mj
from minijinja_py.syntax import lalr, parser

from corpus_support import CORPUS, corpus_available, template_source

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_tables_match_the_grammar() -> None:
    rebuilt = lalr.build_tables(lalr.read_grammar(), parser.START_SYMBOLS)
    from minijinja_py.syntax._lalr_tables import TABLES as shipped

    assert shipped == rebuilt, "grammar/jinja.lark changed: run `python tools/build_lalr_tables.py`"


class _LarkToken(tuple):
    """A scanner token, ``(type, text, offset)``, with what Lark's parser reads of a token."""

    __slots__ = ()
    type = property(lambda self: self[0])
    value = property(lambda self: self[1])
    start_pos = end_pos = line = column = end_line = end_column = None


def _lark_parse_function():
    from lark import Lark, Transformer, Tree
    from lark.lexer import Lexer

    class TokenFeed(Lexer):
        def __init__(self, conf):
            pass

        def lex(self, tokens, *_):
            return iter(tokens)

    current = []  # the transformer of the parse in progress

    class Adapter(Transformer):
        def __default__(self, data, children, meta):
            if data.startswith("_"):
                return Tree(data, children)
            return getattr(current[-1], data)(children)

    lark = Lark(lalr.read_grammar(), parser="lalr", lexer=TokenFeed, start=parser.START_SYMBOLS,
                maybe_placeholders=False, transformer=Adapter())

    def parse_with_lark(tables, tokens, start, transformer):
        current.append(transformer)
        try:
            return lark.parse([_LarkToken(token) for token in tokens], start=start)
        finally:
            current.pop()

    return parse_with_lark


def _sources():
    sources = [("inline", "{{ a if b else c }}{% for x, y in d.items() if x recursive %}"
                "{{ loop(y) }}{% endfor %}{{ -2 ** 2 | abs ~ 'x' }}{{ f(*a, k=1, **b) }}"
                "{% set ns.x %}{{ l.0[1:-1:2] }}{% endset %}{{ x is divisibleby 3 }}")]
    if corpus_available():
        for path in sorted((CORPUS / "templates").glob("*.jinja")):
            sources.append((path.stem, template_source(path.stem)))
    return sources


@pytest.mark.parametrize("name,source", _sources(), ids=[s[0] for s in _sources()])
def test_table_driver_builds_the_same_ast_as_lark(name, source, monkeypatch) -> None:
    expected_error = None
    try:
        ours = repr(parser.parse(source, trim_blocks=True, lstrip_blocks=True))
    except mj.TemplateSyntaxError as exc:
        ours, expected_error = None, exc
    monkeypatch.setattr(lalr, "parse", _LARK_PARSE)
    if expected_error is None:
        assert repr(parser.parse(source, trim_blocks=True, lstrip_blocks=True)) == ours
    else:
        with pytest.raises(Exception):
            parser.parse(source, trim_blocks=True, lstrip_blocks=True)


_LARK_PARSE = _lark_parse_function()
