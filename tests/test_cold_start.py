"""What a cold start skips, checked: shipped regex programs are exactly what ``re`` compiles,
the render in progress is per thread, and a cold render loads no module it does not need."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import minijinja_py as mj
from minijinja_py.syntax import regex as aot_regex, scanner
from minijinja_py.guard import limits


def test_shipped_regex_programs_are_what_re_compiles_now() -> None:
    from minijinja_py.syntax._regex_programs import PROGRAMS

    scanner.compile_all_patterns()
    shipped = PROGRAMS.get(aot_regex.engine_key())
    if shipped is not None:
        assert set(shipped) == aot_regex.requested, \
            "a scanner pattern changed: run `python tools/build_regex_programs.py`"
        for (pattern, flags), program in shipped.items():
            assert program == aot_regex.program(pattern, flags), pattern
    for pattern, flags in aot_regex.requested:  # shipped or not, the same Pattern as re's
        ours, theirs = aot_regex.compile(pattern, flags), re.compile(pattern, flags)
        assert (ours.pattern, ours.flags, ours.groups, ours.groupindex) == \
            (theirs.pattern, theirs.flags, theirs.groups, theirs.groupindex)


def test_scanner_patterns_match_as_re_compiles_them() -> None:
    samples = ["  name }}", " 1_000.5e-3 %}\n", "'it\\'s' }}", "-}}  \n", "** 2", "x|trim -%}"]
    for pattern in (scanner._TAG_TOKEN_RE, scanner._NAME_TAG_RE, scanner._rare("token")):
        theirs = re.compile(pattern.pattern, pattern.flags)
        for text in samples:
            for start in range(len(text)):
                ours_match, their_match = pattern.match(text, start), theirs.match(text, start)
                assert (ours_match and (ours_match.span(), ours_match.groups())) == \
                    (their_match and (their_match.span(), their_match.groups()))


def test_a_program_the_engine_refuses_is_compiled_as_usual(monkeypatch) -> None:
    aot_regex.compile(r"\w")  # the shipped programs are loaded
    pattern = r"a+(b)?"
    monkeypatch.setitem(aot_regex._programs, (pattern, 0), (32, (1, 2, 3), 1, {}, (None,)))
    compiled = aot_regex.compile(pattern)
    assert compiled.match("aab").group(1) == "b"


def test_the_render_in_progress_is_per_thread_and_nests() -> None:
    outer, inner = mj.Limits(max_steps=5), mj.Limits(max_steps=7)
    seen_elsewhere = []
    token = limits.activate(outer)
    try:
        thread = threading.Thread(target=lambda: seen_elsewhere.append(limits.current_render()))
        thread.start()
        thread.join()
        assert limits.current_limits() is outer
        nested = limits.activate(inner)
        assert limits.current_limits() is inner
        limits.deactivate(nested)
        assert limits.current_limits() is outer
    finally:
        limits.deactivate(token)
    assert seen_elsewhere == [None]
    assert limits.current_render() is None


def test_a_cold_render_loads_no_extension_module_it_can_do_without() -> None:
    code = ("import sys, datetime; before = set(sys.modules)\n"
            "import minijinja_py as mj\n"
            "env = mj.chat_environment(now=datetime.datetime(2025, 1, 1))\n"
            "env.from_string('{% for m in messages %}{{ m.role|trim }}{# c #}{% endfor %}"
            "{{ \"\\\\n\" ~ tools|tojson }}')"
            ".render(messages=[{'role': 'user'}], tools=[{'name': 'f'}])\n"
            "print(' '.join(sorted(set(sys.modules) - before)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    # json: the package (its decoder compiles regular expressions), not its C module;
    # encodings.unicode_escape: the codec of rarer escapes than "\n"
    for unwanted in ("zlib", "bisect", "contextvars", "hashlib", "threading", "typing",
                     "minijinja_py.runtime.filters.tojson", "minijinja_py.compiler.codegen",
                     "minijinja_py.compiler.specs", "json", "json.decoder",
                     "encodings.unicode_escape"):
        assert unwanted not in loaded, unwanted
    assert "minijinja_py._startup.fastimport" in loaded


def test_the_commonest_escapes_decode_as_the_codec_decodes_them() -> None:
    """parser._simple_unescape: every string of up to five characters from these, decoded
    as Python's unicode-escape codec decodes it (Jinja2's way), or left to the codec."""
    import itertools
    import warnings

    from minijinja_py.syntax.parser import _simple_unescape

    alphabet = ["\\", "n", "t", "r", "'", '"', "x", "0", "é", "\n"]
    decoded_here = 0
    for size in range(6):
        for characters in itertools.product(alphabet, repeat=size):
            body = "".join(characters)
            simple = _simple_unescape(body)
            if simple is None:
                continue
            decoded_here += 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                codec = body.encode("ascii", "backslashreplace").decode("unicode-escape")
            assert simple == codec, body
    assert decoded_here > 50_000


# A fresh process compiles a template making more objects than gcpause.PROMOTE_AFTER (one `if`
# and one sum per line) and reports: the collections of the young generation the compile ran,
# the young objects left, the frozen ones, and whether the collector is on. With "freeze",
# the host has frozen its own objects first.
_PROMOTION_CHILD = """
import gc, sys
import minijinja_py as mj
from minijinja_py._startup import gcpause
env = mj.chat_environment()
if sys.argv[1] == "freeze":
    gc.freeze()
frozen = gc.get_freeze_count()
source = "".join("{%% if x%d %%}{{ a + 'x' + b }}{%% endif %%}" % i for i in range(400))
gc.collect()  # (young objects from before would be collected as the compile starts)
before = gc.get_stats()[0]["collections"]
made = []
real_exit = gcpause.PausedGC.__exit__
def counting_exit(self, *exc_info):
    made.append(gc.get_count()[0])
    return real_exit(self, *exc_info)
gcpause.PausedGC.__exit__ = counting_exit
template = env.from_string(source)
print(max(made), gc.get_stats()[0]["collections"] - before, gc.get_count()[0],
      gc.get_freeze_count() - frozen, gc.isenabled(), frozen)
"""


def test_a_compile_moves_what_it_made_to_the_oldest_generation_unwalked() -> None:
    from minijinja_py._startup import gcpause

    def child(mode: str) -> list:
        out = subprocess.run([sys.executable, "-c", _PROMOTION_CHILD, mode],
                             capture_output=True, text=True, check=True).stdout.split()
        return [int(x) for x in out[:4]] + out[4:]

    made, collections, young, frozen, enabled, frozen_at_start = child("plain")
    assert made >= gcpause.PROMOTE_AFTER  # (else the template tests nothing)
    if frozen_at_start == "0":
        # no young collection walked them, none is left young, nothing stays frozen
        assert (collections, frozen, enabled) == (0, 0, "True")
        assert young < 100
    else:  # Python 3.12 freezes objects of its own as it starts: those stay so
        assert collections >= 1 and frozen == 0 and enabled == "True"
    # a host's own frozen objects stay frozen: then the collector walks them as usual
    made, collections, young, frozen, enabled, _ = child("freeze")
    assert made >= gcpause.PROMOTE_AFTER
    assert collections >= 1 and frozen == 0 and enabled == "True"


def test_promoted_garbage_cycles_wait_for_a_full_collection() -> None:
    import gc
    import weakref

    from minijinja_py._startup import gcpause

    class Cycle:
        pass

    if gc.get_freeze_count():  # pragma: no cover - a host that froze objects: nothing moves
        assert not gcpause.promote_young_objects(gc)
        return
    gc.collect()
    first = Cycle()
    first.other = Cycle()
    first.other.other = first
    alive = weakref.ref(first)
    del first
    assert gcpause.promote_young_objects(gc) and gc.get_freeze_count() == 0
    gc.collect(1)  # the young generations: it is not there any more
    assert alive() is not None
    gc.collect()
    assert alive() is None


# A process that makes an environment and compiles a template per request, dropping a reference
# cycle of its own each time (as an exception kept with its traceback does): the cycles of the
# requests after the pauses' promotion budget is spent must go in young collections, with no
# gc.collect(). Prints: cycles dropped after the budget, how many of them are still alive,
# young collections meanwhile, objects promoted in all, the budget, and one compile's objects.
_REQUESTS_CHILD = """
import gc, weakref
import minijinja_py as mj
from minijinja_py._startup import gcpause
source = "".join("{%% if x%d %%}{{ a + 'x' + b }}{%% endif %%}" % i for i in range(100))
class Cycle:
    pass
alive, made, collections = [], [], None
never = gc.get_freeze_count() != 0  # Python 3.12 froze objects of its own: nothing promoted
real_exit = gcpause.PausedGC.__exit__
def counting_exit(self, *exc_info):
    made.append(gc.get_count()[0])
    return real_exit(self, *exc_info)
gcpause.PausedGC.__exit__ = counting_exit
for request in range(40):
    spent = never or gcpause.PausedGC._promoted >= gcpause.PROMOTE_BUDGET
    if spent and collections is None:
        collections = gc.get_stats()[0]["collections"]
    cycle = Cycle()
    cycle.me = cycle
    if spent:
        alive.append(weakref.ref(cycle))
    del cycle
    env = mj.chat_environment()
    env.from_string(source).render(x1=True, a="1", b="2")
print(len(alive), sum(ref() is not None for ref in alive),
      gc.get_stats()[0]["collections"] - (collections or 0), gcpause.PausedGC._promoted,
      gcpause.PROMOTE_BUDGET, max(made))
"""


def test_a_process_compiling_per_request_still_collects_its_garbage_cycles() -> None:
    out = subprocess.run([sys.executable, "-c", _REQUESTS_CHILD], capture_output=True,
                         text=True, check=True,
                         env=dict(os.environ, MINIJINJA_PY_CACHE="0")).stdout.split()
    dropped, still_alive, collections, promoted, budget, one_compile = map(int, out)
    assert one_compile >= 1_000  # each request's compile is a pause worth promoting
    # the budget is spent within the first requests (or, on Python 3.12, nothing is promoted
    # and it never is: then every request counts)
    assert promoted < budget + one_compile
    assert dropped >= 30
    assert collections >= dropped // 2  # the young generation is collected as usual...
    assert still_alive <= 1  # ...and the cycles with it (the last one may wait for the next)


def test_a_cold_start_walks_nothing_it_made() -> None:
    """Importing the engine, making the first environment, compiling and rendering a chat
    template in a fresh process: no collection of the young generation runs, what the pauses
    made having been promoted (where nothing was frozen before: see above)."""
    # (the package's module, the loader's and the pause's own load before any pause)
    code = ("import gc, sys\n"
            "import minijinja_py as mj, minijinja_py._startup.fastimport, minijinja_py._startup.gcpause\n"
            "gc.collect()\n"
            "frozen = gc.get_freeze_count()\n"
            "before = gc.get_stats()[0]['collections']\n"
            "env = mj.chat_environment()\n"
            "out = env.from_string(open(sys.argv[1]).read()).render(messages=[\n"
            "    {'role': 'user', 'content': 'Hi'}], add_generation_prompt=True)\n"
            "print(gc.get_stats()[0]['collections'] - before, frozen)")
    template = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "examples", "chatml.jinja")
    collections, frozen = subprocess.run(
        [sys.executable, "-c", code, template], capture_output=True, text=True,
        check=True, env=dict(os.environ, MINIJINJA_PY_CACHE="0")).stdout.split()
    if frozen == "0":
        assert collections == "0"
    else:  # Python 3.12: nothing promoted, the collector walks them as usual
        assert int(collections) >= 1


# A fresh process without site (whose startup hooks, such as an editable install's finder,
# import pathlib and others before the first line runs), rendering examples/chatml.jinja one
# way, then printing the modules that appeared from the first import of the package on.
_FIRST_RENDER_CHILD = """
import sys
source = open(sys.argv[1], encoding="utf-8").read()
messages = [{"role": "user", "content": "Hi"}]
before = set(sys.modules)
import minijinja_py as mj
RENDER
print(" ".join(sorted(set(sys.modules) - before)))
"""

_FIRST_RENDERS = {
    "engine": "mj.chat_environment().from_string(source).render(messages=messages)",
    "ChatTemplate": "mj.ChatTemplate(source).render(messages, add_generation_prompt=True)",
    "apply_chat_template": "mj.apply_chat_template(source, messages, add_generation_prompt=True)",
}


def _modules_a_first_render_loads(way: str) -> set:
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(mj.__file__)))
    template = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "examples", "chatml.jinja")
    env = dict(os.environ, MINIJINJA_PY_CACHE="0", PYTHONPATH=package_parent)
    code = _FIRST_RENDER_CHILD.replace("RENDER", _FIRST_RENDERS[way])
    out = subprocess.run([sys.executable, "-S", "-c", code, template], capture_output=True,
                         text=True, check=True, env=env).stdout
    return set(out.split())


def test_the_chat_api_first_render_loads_only_the_pipeline_beyond_the_engine() -> None:
    """A first render through the chat API imports the engine's modules and the chat
    pipeline, nothing else: not the config loader, the tokenizer layer or the tool schemas,
    nor the standard modules they use (dataclasses, inspect, json, pathlib, typing...), which
    doubled the cold start of a first chat render."""
    engine = _modules_a_first_render_loads("engine")
    assert "minijinja_py.compiler.closures" in engine  # (the child did render)
    pipeline = {"minijinja_py.chat", "minijinja_py.chat.pipeline"}
    for way, facade in (("ChatTemplate", set()),
                        ("apply_chat_template", {"minijinja_py.chat.api"})):
        loaded = _modules_a_first_render_loads(way)
        assert loaded - engine == pipeline | facade, way
        for unwanted in ("dataclasses", "inspect", "json", "pathlib", "typing", "threading",
                         "minijinja_py.chat.config", "minijinja_py.chat.tokens",
                         "minijinja_py.chat.schema"):
            assert unwanted not in loaded, (way, unwanted)
