"""Every template x context of the shared corpus renders exactly like bare Jinja2 3.1.6.

Runs when ../shared/corpus exists (CI has it; set MINIJINJA_PY_CORPUS to point elsewhere).
The reference is goldens-jinja/: the same Jinja2 environment transformers configures, fed the
context's variables as they are. A pair whose golden is an error must raise a TemplateError.
"""

from __future__ import annotations

import pytest

import minijinja_py as mj

from corpus_support import (FIXED_NOW, corpus_available, expected, load_contexts, pairs,
                            readme_counts,
                            template_source)

pytestmark = pytest.mark.skipif(not corpus_available(), reason="../shared/corpus not present")

_PAIRS = list(pairs()) if corpus_available() else []
_CONTEXTS = load_contexts() if corpus_available() else {}
_ENV = mj.chat_environment(now=FIXED_NOW)


@pytest.mark.parametrize("slug,context", _PAIRS, ids=[f"{s}/{c}" for s, c in _PAIRS])
def test_corpus_pair_matches_jinja2(slug: str, context: str) -> None:
    output, error = expected("goldens-jinja", slug, context)
    source = template_source(slug)
    if error is None:
        rendered = _ENV.from_string(source, name=slug).render(**_CONTEXTS[context])
        assert rendered == output
    else:
        with pytest.raises(mj.TemplateError):
            _ENV.from_string(source, name=slug).render(**_CONTEXTS[context])


def test_corpus_is_complete() -> None:
    """Every pair the corpus README promises is here; a partial copy must not pass."""
    templates, contexts, pair_count = readme_counts()
    assert templates * contexts == pair_count
    assert len(_PAIRS) == pair_count
