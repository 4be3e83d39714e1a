"""Hostile model folders, config files, GGUF files and command lines.

The promise of the loading paths (``ChatTemplate.from_tokenizer_config``, ``load_chat_config``,
``read_gguf_chat_info``, ``ChatTokenizer.from_pretrained`` and the ``minijinja-py`` command):
bad input gives one clear error (a :class:`ChatConfigError`/:class:`GGUFError`, both
ValueErrors, naming the file; on the command line one ``minijinja-py: error: ...`` line and a
non-zero exit), never a traceback, never a hang, and nothing outside the model folder is ever
read. A tokenizer is loaded in time linear in its files, and what it may hold is capped
(:mod:`minijinja_py.chat.tokenizer_caps`), checked before the tokenizers library builds it.

Everything here uses real files in ``tmp_path``: real symlinks, real FIFOs (``os.mkfifo``),
``/dev/zero``. Anything that would hang or eat memory if the protection regressed runs in a
child process with a timeout (and a cap on its address space), so a regression fails one test
instead of stalling the run.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import minijinja_py as mj
from minijinja_py.chat import cli, gguf
from minijinja_py.chat import (MAX_CONFIG_BYTES, ChatConfigError, ChatTemplate,
                               ChatTemplateValueError, load_chat_config)
from minijinja_py.chat.gguf import GGUFError, is_gguf_file, read_gguf_chat_info, read_gguf_metadata

PACKAGE_PARENT = str(Path(mj.__file__).resolve().parent.parent)
TIMEOUT = 20  # seconds; generous, the machine is shared: a hang is what this catches
HI = [{"role": "user", "content": "hi"}]
# What the file outside the folder holds: it must never show up anywhere. It looks like template
# syntax with an error, so that reading it would print it in a syntax error's caret line.
SECRET = "TOP-SECRET-6f1d {{ password"

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")


# ---- helpers --------------------------------------------------------------------------------
def _limit_memory() -> None:  # pragma: no cover - runs in the child
    try:
        import resource

        cap = 2 * 1024 ** 3
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError):
        pass


def run_child(code: str, *args: str) -> Dict[str, Any]:
    """Run ``code`` in a fresh interpreter (timeout, 2 GB address space); it prints one JSON
    line. A timeout fails the test with a clear message instead of hanging the run."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                                capture_output=True, text=True, env=env, timeout=TIMEOUT,
                                preexec_fn=_limit_memory if os.name == "posix" else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {TIMEOUT} s (the loader blocked or ran away)")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


LOAD_IN_CHILD = """
    import json, sys
    from minijinja_py.chat import ChatTemplate
    try:
        ct = ChatTemplate.from_tokenizer_config(sys.argv[1])
        print(json.dumps({"ok": True, "source": ct.source}))
    except Exception as exc:
        print(json.dumps({"ok": False, "type": type(exc).__name__, "message": str(exc),
                          "value_error": isinstance(exc, ValueError)}))
"""


def load_in_child(path: Path) -> Dict[str, Any]:
    return run_child(LOAD_IN_CHILD, str(path))


def run_cli(args: List[str], cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """The command line in a child process, with a timeout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        result = subprocess.run([sys.executable, "-m", "minijinja_py", *args],
                                capture_output=True, env=env, timeout=TIMEOUT,
                                cwd=str(cwd) if cwd else None,
                                preexec_fn=_limit_memory if os.name == "posix" else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"minijinja-py {' '.join(args)} timed out after {TIMEOUT} s")
    result.stdout = result.stdout.decode("utf-8", "replace")
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


def assert_one_line_error(returncode: int, stdout: str, stderr: str, *needles: str) -> None:
    assert returncode not in (0, None), (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("minijinja-py: error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, stderr)
    assert SECRET not in stdout and SECRET not in stderr
    assert "TOP-SECRET" not in stdout and "TOP-SECRET" not in stderr


def cli_main(capsys: pytest.CaptureFixture, args: List[str]) -> tuple:
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A model folder with a good main template and an additional-templates directory, and a
    secret file next to (outside) it."""
    model = tmp_path / "model"
    (model / "additional_chat_templates").mkdir(parents=True)
    (model / "chat_template.jinja").write_text("main:{{ messages[0].content }}")
    (tmp_path / "secret.txt").write_text(SECRET)
    return model


def extra(folder: Path, name: str = "x.jinja") -> Path:
    return folder / "additional_chat_templates" / name


def assert_refused(exc: BaseException, path: Path, reason: str) -> None:
    assert isinstance(exc, ChatConfigError) and isinstance(exc, ValueError)
    message = str(exc)
    assert str(path) in message, message
    assert reason in message, message
    assert "\n" not in message
    assert "TOP-SECRET" not in message


# ---- 1. only regular files inside the folder ------------------------------------------------
@needs_dev_zero
def test_a_symlink_to_dev_zero_is_refused_without_reading(folder: Path) -> None:
    link = extra(folder)
    os.symlink("/dev/zero", link)
    outcome = load_in_child(folder)
    assert outcome["ok"] is False and outcome["type"] == "ChatConfigError", outcome
    assert str(link) in outcome["message"] and "outside the model folder" in outcome["message"]


@needs_fifo
@pytest.mark.parametrize("name", ["additional_chat_templates/x.jinja", "chat_template.jinja",
                                  "tokenizer_config.json", "special_tokens_map.json"])
def test_a_fifo_in_the_folder_is_refused_without_blocking(folder: Path, name: str) -> None:
    if name == "chat_template.jinja":
        (folder / name).unlink()
    os.mkfifo(folder / name)
    outcome = load_in_child(folder)
    assert outcome["ok"] is False and outcome["type"] == "ChatConfigError", outcome
    assert str(folder / name) in outcome["message"]
    assert "FIFO" in outcome["message"] and "not a regular file" in outcome["message"]


@needs_fifo
def test_a_fifo_named_directly_is_refused_without_blocking(tmp_path: Path) -> None:
    for name in ("t.jinja", "tokenizer_config.json", "model.gguf", "no_suffix"):
        os.mkfifo(tmp_path / name)
        outcome = load_in_child(tmp_path / name)
        assert outcome["type"] == "ChatConfigError", outcome
        assert "FIFO" in outcome["message"] and str(tmp_path / name) in outcome["message"]


@needs_dev_zero
def test_a_device_named_directly_is_refused(tmp_path: Path) -> None:
    outcome = load_in_child(Path("/dev/zero"))
    assert outcome["type"] == "ChatConfigError" and "character device" in outcome["message"]
    os.symlink("/dev/zero", tmp_path / "zero.jinja")
    outcome = load_in_child(tmp_path / "zero.jinja")
    assert outcome["type"] == "ChatConfigError" and "character device" in outcome["message"]


@pytest.mark.parametrize("name", ["additional_chat_templates/x.jinja", "chat_template.jinja",
                                  "tokenizer_config.json", "special_tokens_map.json"])
def test_a_symlink_leading_outside_the_folder_is_never_read(folder: Path, name: str) -> None:
    target = folder.parent / "secret.txt"
    if name.endswith(".json"):
        (folder / "chat_template.jinja").unlink()
        target.write_text(json.dumps({"chat_template": SECRET, "bos_token": SECRET}))
    elif name == "chat_template.jinja":
        (folder / name).unlink()
    os.symlink(target, folder / name)
    with pytest.raises(ChatConfigError) as info:
        ChatTemplate.from_tokenizer_config(folder)
    assert_refused(info.value, folder / name, "leads outside the model folder")
    # relative links, and links through a linked directory, are resolved the same way
    (folder / name).unlink()
    os.symlink(os.path.relpath(target, (folder / name).parent), folder / name)
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, folder / name, "leads outside the model folder")


def test_a_linked_template_directory_leading_outside_is_refused(folder: Path,
                                                                 tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.jinja").write_text(SECRET)
    (folder / "additional_chat_templates").rmdir()
    os.symlink(outside, folder / "additional_chat_templates")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, folder / "additional_chat_templates", "outside the model folder")


def test_a_sibling_whose_name_begins_with_the_folders_is_outside(folder: Path) -> None:
    # model-old/ is beside model/, not in it, though its path begins with model's
    sibling = folder.parent / (folder.name + "-old")
    sibling.mkdir()
    (sibling / "chat_template.jinja").write_text(SECRET)
    (folder / "chat_template.jinja").unlink()
    os.symlink(sibling / "chat_template.jinja", folder / "chat_template.jinja")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, folder / "chat_template.jinja", "leads outside the model folder")


def test_symlinks_inside_the_folder_are_fine(folder: Path) -> None:
    os.symlink("../chat_template.jinja", extra(folder, "alias.jinja"))
    (folder / "real_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    os.symlink("real_config.json", folder / "tokenizer_config.json")
    config = load_chat_config(folder)
    assert config.templates == {"default": "main:{{ messages[0].content }}",
                                "alias": "main:{{ messages[0].content }}"}
    assert config.special_tokens == {"bos_token": "<s>"}
    # the folder itself may be reached through a symlink
    os.symlink(folder, folder.parent / "linked-model")
    assert ChatTemplate.from_tokenizer_config(folder.parent / "linked-model").render(HI) == \
        "main:hi"


def test_a_hugging_face_cache_snapshot_reads_its_blobs(tmp_path: Path) -> None:
    # models--org--name/snapshots/<rev>/<file> -> ../../blobs/<hash>: the hub cache layout
    repo = tmp_path / "hub" / "models--org--name"
    snapshot = repo / "snapshots" / "0123abcd"
    (snapshot / "additional_chat_templates").mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "blobs" / "aaa").write_text(json.dumps({"chat_template": "cfg", "eos_token": "</s>"}))
    (repo / "blobs" / "bbb").write_text("tool:{{ eos_token }}")
    os.symlink("../../blobs/aaa", snapshot / "tokenizer_config.json")
    os.symlink("../../../blobs/bbb", snapshot / "additional_chat_templates" / "tool_use.jinja")
    config = load_chat_config(snapshot)
    assert config.templates == {"tool_use": "tool:{{ eos_token }}"}
    assert config.special_tokens == {"eos_token": "</s>"}
    # ... but nothing else outside the snapshot
    (tmp_path / "hub" / "secret.txt").write_text(SECRET)
    os.symlink("../../../secret.txt", snapshot / "chat_template.jinja")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(snapshot)
    assert_refused(info.value, snapshot / "chat_template.jinja", "outside the model folder")


def test_only_a_hub_repositorys_blobs_count_as_inside_its_snapshots(tmp_path: Path) -> None:
    # the same layout in a folder that is not a hub cache repository (no models--org--name):
    # its blobs are outside the snapshot like anything else
    repo = tmp_path / "project"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "blobs" / "aaa").write_text(SECRET)
    os.symlink("../../blobs/aaa", snapshot / "chat_template.jinja")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(snapshot)
    assert_refused(info.value, snapshot / "chat_template.jinja", "outside the model folder")


@pytest.mark.parametrize("kind", ["directory", "dangling symlink"])
def test_other_odd_entries_are_refused(folder: Path, kind: str) -> None:
    if kind == "directory":
        extra(folder).mkdir()
        reason = "a directory, not a regular file"
    else:
        os.symlink("missing.jinja", extra(folder))
        reason = "does not exist"
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, extra(folder), reason)


def test_only_jinja_files_are_listed(folder: Path) -> None:
    (folder / "additional_chat_templates" / "notes.txt").write_text("{{ oops")
    (folder / "additional_chat_templates" / "README").write_text("{{ oops")
    assert sorted(load_chat_config(folder).templates) == ["default"]
    # as Path.glob("*.jinja") (transformers) lists them, hidden names included
    (folder / "additional_chat_templates" / ".hidden.jinja").write_text("h")
    assert sorted(load_chat_config(folder).templates) == [".hidden", "default"]


# ---- sizes ----------------------------------------------------------------------------------
def test_an_oversize_template_is_refused(folder: Path) -> None:
    cap = mj.Limits().max_source_size
    extra(folder).write_text("x" * (cap + 1))
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, extra(folder), "max_source_size")
    # far larger than any template: refused from fstat, before reading
    with open(extra(folder), "wb") as handle:
        handle.truncate(4 * cap + 1)
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, extra(folder), "bytes, more than")
    # exactly at the limit (multi-byte characters count as one) is fine
    extra(folder).write_text("é" * cap, encoding="utf-8")
    assert len(load_chat_config(folder).templates["x"]) == cap


def test_an_oversize_config_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer_config.json"
    with open(path, "wb") as handle:  # sparse: costs no disk
        handle.truncate(MAX_CONFIG_BYTES + 1)
    for source in (tmp_path, path):
        with pytest.raises(ChatConfigError) as info:
            load_chat_config(source)
        assert_refused(info.value, path, "bytes, more than")


# ---- 2. JSON problems -----------------------------------------------------------------------
JSON_PROBLEMS = [
    ("deep", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("deep object", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    ("huge int", b'{"chat_template": "x", "n": ' + b"7" * 5000 + b"}", "digits"),
    ("invalid utf-8", b'{"chat_template": "\xff\xfe"}', "not UTF-8"),
    ("invalid json", b'{"chat_template": ', "not valid JSON"),
    ("not an object", b"[1, 2]", "expected a JSON object"),
]


@pytest.mark.parametrize("label,data,reason", JSON_PROBLEMS, ids=[p[0] for p in JSON_PROBLEMS])
@pytest.mark.parametrize("where", ["folder", "file"])
def test_json_problems_are_config_errors(tmp_path: Path, label: str, data: bytes, reason: str,
                                         where: str) -> None:
    path = tmp_path / "tokenizer_config.json"
    path.write_bytes(data)
    with pytest.raises(ChatConfigError) as info:
        ChatTemplate.from_tokenizer_config(tmp_path if where == "folder" else path)
    assert_refused(info.value, path, reason)


def test_json_problems_in_the_other_config_files(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "chat_template.json").write_bytes(b"[" * 100_000)
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(tmp_path)
    assert_refused(info.value, tmp_path / "chat_template.json", "nested too deeply")
    (tmp_path / "special_tokens_map.json").write_bytes(b'{"bos_token": ' + b"9" * 5000 + b"}")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(tmp_path)
    assert_refused(info.value, tmp_path / "special_tokens_map.json", "digits")


def test_a_template_file_that_is_not_utf8(folder: Path) -> None:
    (folder / "chat_template.jinja").write_bytes(b"ok \xff")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder)
    assert_refused(info.value, folder / "chat_template.jinja", "not UTF-8")
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(folder / "chat_template.jinja")
    assert_refused(info.value, folder / "chat_template.jinja", "not UTF-8")


# ---- 3. GGUF --------------------------------------------------------------------------------
def gguf_header(entries: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, entries)


def gguf_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def gguf_nested_empty_arrays(count: int) -> bytes:
    """One key holding ``count`` empty uint32 arrays (12 bytes each), then a template."""
    return b"".join([
        gguf_header(2),
        gguf_string("junk"), struct.pack("<I", 9), struct.pack("<IQ", 9, count),
        struct.pack("<IQ", 4, 0) * count,
        gguf_string("tokenizer.chat_template"), struct.pack("<I", 8), gguf_string("T{{ 1 }}"),
    ])


def gguf_deep_arrays(depth: int) -> bytes:
    # [[[...[]...]]]: each level an array holding one array
    body = struct.pack("<IQ", 4, 0)
    for _ in range(depth - 1):
        body = struct.pack("<IQ", 9, 1) + body
    return gguf_header(1) + gguf_string("deep") + struct.pack("<I", 9) + body


def test_gguf_arrays_nested_too_deep_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.gguf"
    path.write_bytes(gguf_deep_arrays(gguf.MAX_ARRAY_DEPTH))
    assert read_gguf_metadata(path)[1]["deep"].count == 1  # the deepest allowed
    path.write_bytes(gguf_deep_arrays(gguf.MAX_ARRAY_DEPTH + 1))
    for read in (read_gguf_chat_info, read_gguf_metadata,
                 lambda p: read_gguf_metadata(p, load_array=lambda key: True)):
        with pytest.raises(GGUFError, match="deeper than") as info:
            read(path)
        assert str(path) in str(info.value)
    with pytest.raises(GGUFError):
        ChatTemplate.from_tokenizer_config(path)


def test_gguf_nested_arrays_are_skipped_without_building_anything(tmp_path: Path) -> None:
    # 200,000 empty arrays (2.4 MB) under a key nobody needs: stepped over, nothing kept
    path = tmp_path / "nested.gguf"
    path.write_bytes(gguf_nested_empty_arrays(200_000))
    outcome = run_child("""
        import json, sys, time, tracemalloc
        from minijinja_py.chat.gguf import read_gguf_chat_info, read_gguf_metadata
        tracemalloc.start()
        info = read_gguf_chat_info(sys.argv[1])
        _, metadata = read_gguf_metadata(sys.argv[1])
        peak = tracemalloc.get_traced_memory()[1]
        print(json.dumps({"templates": info.templates, "junk": repr(metadata["junk"]),
                          "peak": peak}))
    """, str(path))
    assert outcome["templates"] == {"default": "T{{ 1 }}"}
    assert outcome["junk"] == "GGUFArray(item_type='array', count=200000)"
    assert outcome["peak"] < 2_000_000, outcome  # a list of 200,000 items would be ~10 MB


def test_gguf_nested_arrays_are_capped_over_the_whole_file(tmp_path: Path) -> None:
    # past MAX_NESTED_ARRAYS (1,000,000: 12 MB of headers) the file is refused; here the cap is
    # lowered so that the file stays small
    path = tmp_path / "nested.gguf"
    path.write_bytes(gguf_nested_empty_arrays(5_000))
    code = """
        import json, sys, time
        from minijinja_py.chat import gguf
        gguf.MAX_NESTED_ARRAYS = 4_999
        try:
            gguf.read_gguf_chat_info(sys.argv[1])
            print(json.dumps({"ok": True}))
        except gguf.GGUFError as exc:
            print(json.dumps({"ok": False, "message": str(exc)}))
    """
    outcome = run_child(code, str(path))
    assert outcome["ok"] is False and "arrays of arrays" in outcome["message"]
    assert str(path) in outcome["message"]


def test_gguf_the_real_cap_stops_the_183_mb_file_at_once(tmp_path: Path) -> None:
    # The hostile file of the issue: 15 million nested empty arrays (183 MB). Only its first
    # bytes are written (the file is sparse): the header's count is refused before any item.
    path = tmp_path / "hostile.gguf"
    head = gguf_nested_empty_arrays(0)
    count = 15_000_000
    data = (gguf_header(2) + gguf_string("junk") + struct.pack("<I", 9)
            + struct.pack("<IQ", 9, count))
    with open(path, "wb") as handle:
        handle.write(data)
        handle.truncate(len(data) + 12 * count + len(head))
    cpu_start = time.thread_time()  # (CPU time: the wall clock grows with the load)
    with pytest.raises(GGUFError, match="more than 1,000,000 arrays"):
        read_gguf_chat_info(path)
    assert time.thread_time() - cpu_start < 10


def test_gguf_strings_in_arrays_are_capped_over_the_whole_file(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(gguf, "MAX_ARRAY_STRINGS", 1_000)
    entries = [gguf_header(2)]
    for key in ("a", "b"):
        entries += [gguf_string(key), struct.pack("<I", 9), struct.pack("<IQ", 8, 600),
                    gguf_string("t") * 600]
    path = tmp_path / "strings.gguf"
    path.write_bytes(b"".join(entries))
    with pytest.raises(GGUFError, match="strings held in arrays"):
        read_gguf_chat_info(path)


def test_gguf_special_tokens_are_found_without_loading_the_vocabulary(tmp_path: Path) -> None:
    tokens = [f"tok{i}" for i in range(1000)]
    ids = {"bos": 0, "eos": 999, "unknown": 256, "padding": 511}
    parts = [gguf_header(2 + len(ids)),
             gguf_string("tokenizer.ggml.tokens"), struct.pack("<I", 9),
             struct.pack("<IQ", 8, len(tokens)), *(gguf_string(t) for t in tokens),
             gguf_string("tokenizer.chat_template"), struct.pack("<I", 8), gguf_string("x")]
    for name, token_id in ids.items():
        parts += [gguf_string(f"tokenizer.ggml.{name}_token_id"), struct.pack("<I", 4),
                  struct.pack("<I", token_id)]
    path = tmp_path / "vocab.gguf"
    path.write_bytes(b"".join(parts))
    info = read_gguf_chat_info(path)
    assert info.special_tokens == {"bos_token": "tok0", "eos_token": "tok999",
                                   "unk_token": "tok256", "pad_token": "tok511"}
    loaded = read_gguf_metadata(path, load_array=lambda key: True)[1]["tokenizer.ggml.tokens"]
    assert loaded == tokens


@needs_fifo
def test_gguf_readers_refuse_a_fifo_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    os.mkfifo(path)
    outcome = run_child("""
        import json, sys
        from minijinja_py.chat.gguf import GGUFError, is_gguf_file, read_gguf_chat_info
        try:
            read_gguf_chat_info(sys.argv[1])
            message = None
        except GGUFError as exc:
            message = str(exc)
        print(json.dumps({"message": message, "is_gguf": is_gguf_file(sys.argv[1]),
                          "dev_zero": is_gguf_file("/dev/zero")}))
    """, str(path))
    assert outcome["is_gguf"] is False and outcome["dev_zero"] is False
    assert "not a regular file" in outcome["message"] and str(path) in outcome["message"]


def test_gguf_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "truncated.gguf"
    path.write_bytes(gguf_header(3)[:-2])
    with pytest.raises(GGUFError) as info:
        read_gguf_chat_info(path)
    assert str(info.value).startswith(f"{path}: corrupt GGUF file")
    assert is_gguf_file(path)


# ---- 4. the request errors are TemplateErrors and ValueErrors -------------------------------
def test_request_errors_are_both_template_and_value_errors() -> None:
    ct = ChatTemplate("{{ messages[0].content }}")
    cases = [
        dict(messages=[]),
        dict(messages=HI, continue_final_message=True, add_generation_prompt=True),
        dict(messages=HI, continue_final_message="missing_field"),
    ]
    for kwargs in cases:
        with pytest.raises(ChatTemplateValueError) as info:
            ct.render(**kwargs)
        assert isinstance(info.value, mj.TemplateError) and isinstance(info.value, ValueError)
        assert info.value.lineno is None and "\n" not in str(info.value)


# ---- 5. the command line --------------------------------------------------------------------
@needs_dev_zero
def test_cli_dev_zero_symlink_in_the_folder(folder: Path) -> None:
    os.symlink("/dev/zero", extra(folder))
    for command in ("render", "check"):
        result = run_cli([command, str(folder)])
        assert_one_line_error(result.returncode, result.stdout, result.stderr, str(extra(folder)),
                              "outside the model folder")


@needs_fifo
def test_cli_fifos(folder: Path, tmp_path: Path) -> None:
    os.mkfifo(extra(folder))
    for command in ("render", "check"):
        result = run_cli([command, str(folder)])
        assert_one_line_error(result.returncode, result.stdout, result.stderr, "FIFO")
    os.mkfifo(tmp_path / "direct.jinja")
    result = run_cli(["render", str(tmp_path / "direct.jinja")])
    assert_one_line_error(result.returncode, result.stdout, result.stderr, "FIFO")


def test_cli_never_shows_a_file_outside_the_folder(folder: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    os.symlink(folder.parent / "secret.txt", extra(folder))
    for args in (["render", str(folder)], ["render", str(folder), "--name", "x"],
                 ["check", str(folder)], ["check", str(folder), "--json"]):
        code, out, err = cli_main(capsys, args)
        assert_one_line_error(code, out, err, "outside the model folder")


@pytest.mark.parametrize("label,data,reason", JSON_PROBLEMS[:4],
                         ids=[p[0] for p in JSON_PROBLEMS[:4]])
def test_cli_bad_tokenizer_config(tmp_path: Path, capsys: pytest.CaptureFixture, label: str,
                                  data: bytes, reason: str) -> None:
    (tmp_path / "tokenizer_config.json").write_bytes(data)
    for args in (["render", str(tmp_path)], ["check", str(tmp_path / "tokenizer_config.json")]):
        code, out, err = cli_main(capsys, args)
        assert_one_line_error(code, out, err, "tokenizer_config.json", reason)


@pytest.mark.parametrize("option", ["--messages", "--tools", "--documents"])
@pytest.mark.parametrize("label,data,reason", [
    ("deep", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("huge int", '[{"role": "user", "content": "x", "n": ' + "1" * 5000 + "}]", "digits"),
    ("invalid", "[{", "not valid JSON"),
], ids=["deep", "huge-int", "invalid"])
def test_cli_bad_json_files(tmp_path: Path, capsys: pytest.CaptureFixture, option: str,
                            label: str, data: str, reason: str) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages | length }}")
    path = tmp_path / "data.json"
    path.write_text(data)
    code, out, err = cli_main(capsys, ["render", str(template), option, str(path)])
    assert_one_line_error(code, out, err, option, reason)
    assert code == 1


def test_cli_deep_but_parseable_messages(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # deep enough to be refused by the chat pipeline rather than by json
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages | tojson }}")
    path = tmp_path / "data.json"
    path.write_text('[{"role": "user", "content": ' + "[" * 500 + "]" * 500 + "}]")
    code, out, err = cli_main(capsys, ["render", str(template), "--messages", str(path)])
    assert_one_line_error(code, out, err, "nested deeper")


@pytest.mark.parametrize("value,reason", [
    ("1" * 5000, "digits"),
    ("[" * 100_000, "nested too deeply"),
    ('{"a":' * 50_000, "nested too deeply"),
    ("not json " * 1000, "is not JSON"),
], ids=["huge-int", "deep-list", "deep-object", "long-invalid"])
def test_cli_bad_var_values(tmp_path: Path, capsys: pytest.CaptureFixture, value: str,
                            reason: str) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ x }}")
    code, out, err = cli_main(capsys, ["render", str(template), "--var", f"x={value}"])
    assert_one_line_error(code, out, err, "--var x", reason)
    assert len(err) < 1000  # the value is not echoed back in full


def test_cli_unreadable_inputs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ x }}")
    code, out, err = cli_main(capsys, ["render", str(template), "--messages", str(tmp_path)])
    assert_one_line_error(code, out, err, "--messages")
    code, out, err = cli_main(capsys, ["render", str(tmp_path / "missing.jinja")])
    assert_one_line_error(code, out, err, "no such file")
    os.symlink("loop", tmp_path / "loop")
    code, out, err = cli_main(capsys, ["render", str(tmp_path / "loop")])
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    if hasattr(os, "geteuid") and os.geteuid() != 0:  # root reads everything
        template.chmod(0)
        try:
            code, out, err = cli_main(capsys, ["render", str(template)])
            assert_one_line_error(code, out, err, str(template))
        finally:
            template.chmod(0o644)


def test_cli_request_errors_are_reported_as_such(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    code, out, err = cli_main(capsys, ["render", str(template), "--continue-field", "nope"])
    assert_one_line_error(code, out, err, "continue_final_message is set")
    assert "the template raised" not in err


def test_cli_lone_surrogates_in_the_output(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("[{{ messages[0].content }}]")
    messages = tmp_path / "m.json"
    messages.write_text('[{"role": "user", "content": "a\\ud800b"}]')
    result = run_cli(["render", str(template), "--messages", str(messages)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[a\\ud800b]"  # a visible escape
    assert "Traceback" not in result.stderr and "lone surrogate" in result.stderr
    result = run_cli(["render", str(template), "--messages", str(messages), "--json"])
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(result.stdout)["text"] == "[a\ud800b]"  # exact JSON


def test_cli_last_resort_net(tmp_path: Path, capsys: pytest.CaptureFixture,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("x")

    def explode(args: Any) -> int:
        raise RuntimeError("something unforeseen\nwith a second line")

    monkeypatch.setattr(cli, "_cmd_render", explode)
    code, out, err = cli_main(capsys, ["render", str(template)])
    assert code == 1
    assert err == "minijinja-py: error: unexpected RuntimeError: something unforeseen\n"

    def recurse(args: Any) -> int:
        return recurse(args)

    monkeypatch.setattr(cli, "_cmd_render", recurse)
    code, out, err = cli_main(capsys, ["render", str(template)])
    assert code == 1 and "RecursionError" in err and len(err.splitlines()) == 1


# ---- 6. tokenizer.json: caps on what loading it builds --------------------------------------
needs_tokenizers = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("tokenizers") is None,
    reason="the tokenizers extra is not installed")

# Loads a model folder with ChatTokenizer in the child; argv[2] (JSON) sets caps of
# tokenizer_caps first (only when given, so that a run without the module shows what the
# loader did before it).
LOAD_TOKENIZER_IN_CHILD = """
    import json, sys
    overrides = json.loads(sys.argv[2])
    if overrides:
        from minijinja_py.chat import tokenizer_caps
        for name, value in overrides.items():
            assert hasattr(tokenizer_caps, name), name
            setattr(tokenizer_caps, name, value)
    from minijinja_py.chat import ChatTokenizer
    try:
        tok = ChatTokenizer.from_pretrained(sys.argv[1])
        print(json.dumps({"ok": True, "added": len(tok.added_tokens_decoder),
                          "vocabulary": tok.backend.get_vocab_size(with_added_tokens=False),
                          "ids": tok.encode(sys.argv[3])}))
    except Exception as exc:
        print(json.dumps({"ok": False, "type": type(exc).__name__, "message": str(exc)}))
"""


def load_tokenizer_in_child(folder: Path, caps: Optional[Dict[str, int]] = None,
                            text: str = "") -> Dict[str, Any]:
    return run_child(LOAD_TOKENIZER_IN_CHILD, str(folder), json.dumps(caps or {}), text)


def letters(count: int) -> List[str]:
    """``count`` distinct short tokens: a..z, then aa..zz, ..."""
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    tokens = list(alphabet)
    tokens += [a + b for a in alphabet for b in alphabet]
    assert count <= len(tokens)
    return tokens[:count]


def write_tokenizer(folder: Path, vocabulary: int = 26, merges: int = 0,
                    added: int = 0, config: Optional[Dict[str, Any]] = None) -> Path:
    """A loadable BPE tokenizer.json: ``vocabulary`` tokens (letters, then pairs of letters),
    ``merges`` of two letters into a pair, ``added`` special tokens ``<|s_N|>``."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: index for index, token in enumerate(letters(max(vocabulary, 26 + merges)))}
    pairs = [token for token in vocab if len(token) == 2][:merges]
    document = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab) + i, "content": f"<|s_{i}|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True} for i in range(added)],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[pair[0], pair[1]] for pair in pairs]}}
    (folder / "tokenizer.json").write_text(json.dumps(document, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps(config or {}))
    return folder


def write_counted_list(folder: Path, key: str, entry: bytes, count: int) -> Path:
    """A tokenizer.json whose ``key`` list (``added_tokens``, or ``vocab``/``merges`` in the
    model) has ``count`` copies of ``entry``: not a loadable tokenizer, but it need not be,
    as the caps are checked before the library reads the file. Written as bytes, fast. (A
    vocabulary is an object of ``"token": id`` entries, or a Unigram one's list.)"""
    folder.mkdir(parents=True, exist_ok=True)
    is_object = key == "vocab" and entry.startswith(b'"')
    opening, closing = (b"{", b"}") if is_object else (b"[", b"]")
    body = opening + b",".join([entry] * count) + closing
    model = {"added_tokens": b'"model": {"type": "BPE", "vocab": {}, "merges": []}',
             "vocab": b'"model": {"type": "BPE", "vocab": ' + body + b', "merges": []}',
             "merges": b'"model": {"type": "BPE", "vocab": {}, "merges": ' + body + b"}"}[key]
    added = body if key == "added_tokens" else b"[]"
    (folder / "tokenizer.json").write_bytes(b'{"version": "1.0", "added_tokens": ' + added
                                            + b", " + model + b"}")
    return folder


ADDED_TOKEN = (b'{"id": 1, "content": "<|reserved_special_token_0|>", "single_word": false, '
               b'"lstrip": false, "rstrip": false, "normalized": false, "special": true}')


@needs_tokenizers
def test_the_issues_600000_added_tokens_are_refused_before_loading(tmp_path: Path) -> None:
    # Issue 34 item 6: a tokenizer.json with 600,000 added tokens (81 MB here, under the
    # 512 MiB byte cap) took over a minute and 2.7 GB, compiling patterns of all of them.
    folder = write_counted_list(tmp_path / "model", "added_tokens", ADDED_TOKEN, 600_000)
    outcome = load_tokenizer_in_child(folder)
    assert outcome["ok"] is False and outcome["type"] == "ChatConfigError", outcome
    assert outcome["message"] == (
        f"{folder / 'tokenizer.json'}: refused: 600,000 added tokens, more than the 262,144 "
        "accepted (the cap, MAX_ADDED_TOKENS)")


@needs_tokenizers
@pytest.mark.parametrize("key,entry,count,what,cap", [
    ("vocab", b'"a": 0', 2_097_153, "vocabulary entries", "2,097,152 accepted (the cap, "
     "MAX_VOCABULARY_SIZE)"),
    ("vocab", b'["a", -1.5]', 2_097_153, "vocabulary entries", "MAX_VOCABULARY_SIZE"),
    ("merges", b'["a", "b"]', 2_097_153, "merges", "2,097,152 accepted (the cap, MAX_MERGES)"),
    ("merges", b'"a b"', 2_097_153, "merges", "MAX_MERGES"),
    ("added_tokens", b'{"content": "x"}', 262_145, "added tokens",
     "262,144 accepted (the cap, MAX_ADDED_TOKENS)"),
], ids=["vocab", "unigram-vocab", "merges", "merges-as-strings", "added-tokens"])
def test_every_list_over_its_cap_is_refused_before_loading(tmp_path: Path, key: str,
                                                           entry: bytes, count: int, what: str,
                                                           cap: str) -> None:
    folder = write_counted_list(tmp_path / "model", key, entry, count)
    outcome = load_tokenizer_in_child(folder)
    assert outcome["ok"] is False and outcome["type"] == "ChatConfigError", outcome
    assert outcome["message"].startswith(f"{folder / 'tokenizer.json'}: refused: {count:,} "
                                         f"{what}, more than the "), outcome
    assert cap in outcome["message"]


@needs_tokenizers
def test_a_million_other_values_are_refused_before_loading(tmp_path: Path) -> None:
    folder = write_tokenizer(tmp_path / "model")
    document = json.loads((folder / "tokenizer.json").read_text())
    document["pre_tokenizer"] = {"type": "Sequence",
                                 "pretokenizers": [{"type": "Whitespace"}] * 1_000_000}
    (folder / "tokenizer.json").write_text(json.dumps(document))
    outcome = load_tokenizer_in_child(folder)
    assert outcome["ok"] is False and outcome["type"] == "ChatConfigError", outcome
    assert outcome["message"] == (
        f"{folder / 'tokenizer.json'}: refused: more than 100,000 JSON values besides the usual "
        "entries of its vocabulary, merges and added tokens (the cap, MAX_OTHER_JSON_VALUES)")


@needs_tokenizers
@pytest.mark.parametrize("key", ["added_tokens_decoder", "additional_special_tokens",
                                 "extra_special_tokens"])
def test_config_token_lists_over_the_cap_are_refused(tmp_path: Path, key: str) -> None:
    # 262,145 added tokens missing from tokenizer.json were added one call each, every call
    # rebuilding the backend's matcher of all of them: quadratic, hours at this size.
    entries: Any = [f"<c{i}>" for i in range(262_145)]
    if key == "added_tokens_decoder":
        entries = {str(100 + i): {"content": token, "special": True}
                   for i, token in enumerate(entries)}
    folder = write_tokenizer(tmp_path / "model", config={key: entries})
    outcome = load_tokenizer_in_child(folder)
    assert outcome["ok"] is False and outcome["type"] == "ChatConfigError", outcome
    assert outcome["message"].startswith(f"{folder / 'tokenizer_config.json'}: refused: "
                                         f"262,145 "), outcome
    assert f"({key}), more than the 262,144 accepted (the cap, MAX_ADDED_TOKENS)" in \
        outcome["message"]


@needs_tokenizers
def test_config_tokens_missing_from_the_tokenizer_are_added_in_linear_time(
        tmp_path: Path) -> None:
    # They were added one backend call each, every call rebuilding the backend's matcher of
    # all added tokens: 20,000 took 74 s, this many would take half an hour. In runs of
    # special and plain tokens they get the same ids, in the config's order.
    count = 100_000
    decoder = {str(26 + i): {"content": f"<c{i}>", "special": i % 50_000 != 0}
               for i in range(count)}
    folder = write_tokenizer(tmp_path / "model", config={"added_tokens_decoder": decoder})
    outcome = load_tokenizer_in_child(folder, text="ab <c0> <c1> <c99999>")
    assert outcome["ok"] is True, outcome
    assert outcome["added"] == count
    assert outcome["ids"] == [0, 1, 26, 27, 26 + 99_999]


@needs_tokenizers
def test_a_quarter_million_added_tokens_load_without_compiling_patterns(tmp_path: Path) -> None:
    # On loading, every added token went into two regular expressions, compiled at about
    # 1.5 microseconds a character: half a minute at this size (the cap, MAX_ADDED_TOKENS).
    # Sanitising no longer needs one, the other is built on first use.
    folder = write_tokenizer(tmp_path / "model", added=262_144)
    outcome = load_tokenizer_in_child(folder, text="ab <|s_7|>cd<|s_262143|>")
    assert outcome["ok"] is True, outcome
    assert outcome["added"] == 262_144
    assert outcome["ids"] == [0, 1, 26 + 7, 2, 3, 26 + 262_143]


@needs_tokenizers
@pytest.mark.parametrize("cap,what,build", [
    ("MAX_VOCABULARY_SIZE", "vocabulary entries", lambda folder, n: write_tokenizer(
        folder, vocabulary=n)),
    ("MAX_MERGES", "merges", lambda folder, n: write_tokenizer(folder, merges=n)),
    ("MAX_ADDED_TOKENS", "added tokens", lambda folder, n: write_tokenizer(folder, added=n)),
], ids=["vocabulary", "merges", "added-tokens"])
def test_a_tokenizer_at_a_cap_loads_and_one_more_is_refused(tmp_path: Path, cap: str,
                                                            what: str, build: Any) -> None:
    # With the cap lowered to 300 (the caps are module constants, read at every load, which
    # trusted deployments may raise).
    at_cap = load_tokenizer_in_child(build(tmp_path / "at", 300), {cap: 300}, "ab cd")
    assert at_cap["ok"] is True, at_cap
    folder = build(tmp_path / "over", 301)
    over = load_tokenizer_in_child(folder, {cap: 300})
    assert over["ok"] is False and over["type"] == "ChatConfigError", over
    assert over["message"] == (f"{folder / 'tokenizer.json'}: refused: 301 {what}, more than "
                               f"the 300 accepted (the cap, {cap})")


@needs_tokenizers
@pytest.mark.parametrize("label,data,reason", [
    ("trailing comma", b'{"added_tokens": [], "model": {"vocab": {"a": 0,}}}',
     "not valid JSON (expected a key at byte 48)"),
    ("unclosed", b'{"added_tokens": [], "model": {"vocab": {"a": 0}',
     "not valid JSON (expected ',' or '}' at byte 48)"),
    ("extra data", b'{"added_tokens": []} {}', "not valid JSON (extra data at byte 21)"),
    ("deep", b'{"normalizer": ' + b"[" * 200 + b"]" * 200 + b"}",
     "refused: its JSON is nested too deeply to read"),
    ("not UTF-8", b'{"model": {"vocab": {"\xff": 0}}}', "not UTF-8 text (invalid start byte)"),
], ids=["trailing-comma", "unclosed", "extra-data", "deep", "not-utf8"])
def test_malformed_tokenizer_json_is_refused_before_loading(tmp_path: Path, label: str,
                                                            data: bytes, reason: str) -> None:
    (tmp_path / "tokenizer.json").write_bytes(data)
    from minijinja_py.chat import ChatTokenizer

    with pytest.raises(ChatConfigError) as info:
        ChatTokenizer.from_pretrained(tmp_path)
    assert str(info.value) == f"{tmp_path / 'tokenizer.json'}: {reason}"


def test_the_scan_counts_every_entry_whatever_its_form() -> None:
    # Usual entries are matched hundreds at a time, others value by value: the count is
    # exact either way, wherever the two meet.
    from minijinja_py.chat import tokenizer_caps

    odd_forms = [b'{"content": "x", "extra": {"nested": [1, 2]}}', b'{"content": "y"}',
                 b"[1]", b'{"content": "z", "more": [' + b"0, " * 20 + b"0]}"]
    for count, every in [(1, 1), (255, 7), (256, 300), (257, 100), (1000, 3), (1300, 256)]:
        entries = [odd_forms[i % len(odd_forms)] if i % every == every - 1 else ADDED_TOKEN
                   for i in range(count)]
        data = b'{"added_tokens": [\n' + b",\n ".join(entries) + b"\n]}"
        assert len(json.loads(data)["added_tokens"]) == count
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tokenizer_caps, "MAX_ADDED_TOKENS", count)
            tokenizer_caps.check_tokenizer_json(data, Path("t.json"))
            patch.setattr(tokenizer_caps, "MAX_ADDED_TOKENS", count - 1)
            with pytest.raises(ChatConfigError, match=f"refused: {count:,} added tokens"):
                tokenizer_caps.check_tokenizer_json(data, Path("t.json"))


@needs_tokenizers
def test_cli_encode_refuses_a_folder_over_a_cap(tmp_path: Path) -> None:
    folder = write_counted_list(tmp_path / "model", "vocab", b'"a": 0', 2_097_153)
    result = run_cli(["encode", str(folder)])
    assert_one_line_error(result.returncode, result.stdout, result.stderr,
                          str(folder / "tokenizer.json"), "2,097,153 vocabulary entries",
                          "MAX_VOCABULARY_SIZE")


# ---- the documented caps ------------------------------------------------------------------------
#: What docs/security.md documents (copied here, not read from the modules): a default
#: changed by mistake fails here; one changed on purpose changes the documentation too.
DOCUMENTED_CAPS = {
    ("minijinja_py.chat.config", "MAX_CONFIG_BYTES"): 16 * 2 ** 20,
    ("minijinja_py.chat.config", "MAX_FOLDER_BYTES"): 64 * 2 ** 20,
    ("minijinja_py.chat.tokenizer_caps", "MAX_VOCABULARY_SIZE"): 2_097_152,
    ("minijinja_py.chat.tokenizer_caps", "MAX_MERGES"): 2_097_152,
    ("minijinja_py.chat.tokenizer_caps", "MAX_ADDED_TOKENS"): 262_144,
    ("minijinja_py.chat.tokenizer_caps", "MAX_OTHER_JSON_VALUES"): 100_000,
}


def test_the_documented_caps() -> None:
    import importlib

    assert {key: getattr(importlib.import_module(key[0]), key[1]) for key in DOCUMENTED_CAPS} \
        == DOCUMENTED_CAPS


def test_the_tokenizer_json_nesting_cap_is_serde_jsons() -> None:
    """128 levels of arrays or objects are read (as serde_json reads them), 129 refused."""
    from minijinja_py.chat import tokenizer_caps

    for depth, refused in ((127, False), (128, False), (129, True)):
        data = b'{"normalizer": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
        if refused:
            with pytest.raises(ChatConfigError, match="nested too deeply"):
                tokenizer_caps.check_tokenizer_json(data, Path("t.json"))
        else:
            tokenizer_caps.check_tokenizer_json(data, Path("t.json"))


def test_the_other_values_cap_at_its_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    from minijinja_py.chat import tokenizer_caps

    def document(values: int) -> bytes:  # the document itself, its list, and `values` ints
        return b'{"normalizer": [' + b", ".join([b"1"] * values) + b"]}"

    monkeypatch.setattr(tokenizer_caps, "MAX_OTHER_JSON_VALUES", 50)
    tokenizer_caps.check_tokenizer_json(document(48), Path("t.json"))
    with pytest.raises(ChatConfigError, match="refused: more than 50 JSON values"):
        tokenizer_caps.check_tokenizer_json(document(49), Path("t.json"))


@pytest.mark.parametrize("key", ["added_tokens_decoder", "additional_special_tokens"])
def test_config_token_lists_at_the_cap_are_read(monkeypatch: pytest.MonkeyPatch,
                                                key: str) -> None:
    from minijinja_py.chat import tokenizer_caps

    monkeypatch.setattr(tokenizer_caps, "MAX_ADDED_TOKENS", 10)
    entries: Any = ({str(i): {"content": f"<t{i}>"} for i in range(10)}
                    if key == "added_tokens_decoder" else [f"<t{i}>" for i in range(10)])
    tokenizer_caps.check_tokenizer_config({key: entries}, Path("c.json"))
    extra: Any = ({**entries, "10": {"content": "<t10>"}} if isinstance(entries, dict)
                  else entries + ["<t10>"])
    with pytest.raises(ChatConfigError, match=f"refused: 11 .* \\({key}\\), more than the 10"):
        tokenizer_caps.check_tokenizer_config({key: extra}, Path("c.json"))


def test_the_files_of_one_folder_add_up_to_at_most_the_folder_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads from one model folder add up to at most MAX_FOLDER_BYTES (here lowered to
    1,000): the config and the templates together, exactly up to the cap."""
    from minijinja_py.chat import files

    monkeypatch.setattr(files, "MAX_FOLDER_BYTES", 1000)
    settings = b'{"eos_token": "' + b"e" * 400 + b'"}'  # 417 bytes
    (tmp_path / "tokenizer_config.json").write_bytes(settings)
    main = tmp_path / "chat_template.jinja"
    main.write_text("m" * (1000 - len(settings)))
    (tmp_path / "additional_chat_templates").mkdir()
    assert load_chat_config(tmp_path).templates == {"default": "m" * 583}  # 1,000 bytes
    extra_template = tmp_path / "additional_chat_templates" / "a.jinja"
    extra_template.write_text("a")  # one byte more
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(tmp_path)
    assert str(info.value) == (f"{extra_template}: refused: the files read from the model "
                               f"folder {tmp_path} add up to more than 1,000 bytes")
    extra_template.unlink()
    main.write_text("m" * 584)
    with pytest.raises(ChatConfigError) as info:
        load_chat_config(tmp_path)
    assert str(info.value) == (f"{main}: refused: the files read from the model folder "
                               f"{tmp_path} add up to more than 1,000 bytes")
