"""The command line, run for real in a subprocess: ``python -m minijinja_py`` and, when it is
installed on PATH, the ``minijinja-py`` console script."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "chatml.jinja"
CONVERSATION = ROOT / "examples" / "conversation.json"
SPAN_OPEN, SPAN_CLOSE = "\u27e6", "\u27e7"

COMMANDS = [pytest.param([sys.executable, "-m", "minijinja_py"], id="python-m")]
_SCRIPT = shutil.which("minijinja-py")
COMMANDS.append(pytest.param([_SCRIPT] if _SCRIPT else None, id="console-script",
                             marks=pytest.mark.skipif(_SCRIPT is None,
                                                      reason="minijinja-py is not on PATH")))


def run(args: List[str], stdin: Optional[str] = None, command: Optional[List[str]] = None,
        cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONIOENCODING"] = "ascii"  # the prompt is written as UTF-8 bytes regardless
    result = subprocess.run((command or [sys.executable, "-m", "minijinja_py"]) + args,
                            input=stdin.encode("utf-8") if stdin is not None else None,
                            capture_output=True, env=env, cwd=str(cwd or ROOT), timeout=120)
    result.stdout = result.stdout.decode("utf-8")
    result.stderr = result.stderr.decode("utf-8")
    assert "Traceback" not in result.stderr, result.stderr
    return result


# ---- render ---------------------------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_render_the_builtin_example(command: List[str]) -> None:
    result = run(["render", str(EXAMPLE)], command=command)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("<|im_start|>system\n")
    assert '"name": "get_weather"' in out  # the example tool
    assert "<tool_call>" in out and "<tool_response>" in out
    assert out.endswith("<|im_start|>user\nGreat! Should I take an umbrella this evening?"
                        "<|im_end|>\n<|im_start|>assistant\n")
    assert result.stderr == ""


def test_render_messages_file_matches_the_api() -> None:
    import minijinja_py.chat as chat

    result = run(["render", str(EXAMPLE), "--messages", str(CONVERSATION)])
    assert result.returncode == 0, result.stderr
    data = json.loads(CONVERSATION.read_text(encoding="utf-8"))
    messages = data.pop("messages")
    expected = chat.ChatTemplate.from_tokenizer_config(EXAMPLE).render(messages, **data)
    assert result.stdout == expected


def test_render_from_stdin_with_options() -> None:
    messages = [{"role": "user", "content": "Salut ! 👋"}]
    result = run(["render", str(EXAMPLE), "--messages", "-", "--no-add-generation-prompt",
                  "--var", "enable_thinking=false"], stdin=json.dumps(messages))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "<|im_start|>user\nSalut ! 👋<|im_end|>\n"
    result = run(["render", str(EXAMPLE), "--messages", "-", "--add-generation-prompt",
                  "--var", "enable_thinking=false"], stdin=json.dumps(messages))
    assert result.stdout.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_render_json_and_spans() -> None:
    result = run(["render", str(EXAMPLE), "--messages", str(CONVERSATION), "--json"])
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert set(payload) == {"text", "generation_spans"}
    spans = payload["generation_spans"]
    assert len(spans) == 2
    text = payload["text"]
    assert text[spans[1][0]:spans[1][1]].endswith("plenty of time.<|im_end|>")

    marked = run(["render", str(EXAMPLE), "--messages", str(CONVERSATION), "--spans"]).stdout
    assert marked.count(SPAN_OPEN) == 2 and marked.count(SPAN_CLOSE) == 2
    assert marked.replace(SPAN_OPEN, "").replace(SPAN_CLOSE, "") == text
    assert f"{SPAN_OPEN}<tool_call>" in marked and f"time.<|im_end|>{SPAN_CLOSE}" in marked


def test_render_tools_documents_and_continue(tmp_path: Path) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": "Q"},
                                    {"role": "assistant", "content": "The answer is"}]))
    documents = tmp_path / "d.json"
    documents.write_text(json.dumps([{"title": "T", "text": "D"}]))
    tools = tmp_path / "t.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "f"}}]))
    result = run(["render", str(EXAMPLE), "--messages", str(messages), "--documents",
                  str(documents), "--tools", str(tools), "--continue-final-message"])
    assert result.returncode == 0, result.stderr
    assert '<document index="1">\nTitle: T\nD\n</document>' in result.stdout
    assert '{"name": "f"}' in result.stdout
    assert result.stdout.endswith("<|im_start|>assistant\nThe answer is")


def test_render_with_a_fixed_clock(tmp_path: Path) -> None:
    template = tmp_path / "date.jinja"
    template.write_text("Today is {{ strftime_now('%d %B %Y') }}.")
    result = run(["render", str(template), "--now", "2025-07-10T12:00:00"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Today is 10 July 2025."


def test_render_a_model_directory_and_named_templates(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": [
            {"name": "default", "template": "{{ bos_token }}default{{ eos_token }}"},
            {"name": "tool_use", "template": "tool_use:{{ tools | length }}"}],
        "bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    # the built-in example has tools, so tool_use is selected, as transformers would
    assert run(["render", str(tmp_path)]).stdout == "tool_use:1"
    assert run(["render", str(tmp_path), "--name", "default"]).stdout == "<s>default</s>"
    config = str(tmp_path / "tokenizer_config.json")
    assert run(["render", config, "--name", "default", "--var",
                'bos_token="[B]"']).stdout == "[B]default</s>"
    result = run(["render", config, "--name", "nope"])
    assert result.returncode == 1
    assert "'default', 'tool_use'" in result.stderr


def write_tiny_gguf(path: Path, template: str) -> None:
    """A GGUF file holding three tokens (bos <|begin|>, eos <|end|>) and ``template``."""
    def string(text: str) -> bytes:
        data = text.encode("utf-8")
        return struct.pack("<Q", len(data)) + data

    tokens = ["<unk>", "<|begin|>", "<|end|>"]
    entries = [
        string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens))
        + b"".join(string(token) for token in tokens),
        string("tokenizer.ggml.bos_token_id") + struct.pack("<II", 4, 1),
        string("tokenizer.ggml.eos_token_id") + struct.pack("<II", 4, 2),
        string("tokenizer.chat_template") + struct.pack("<I", 8) + string(template),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries))


def test_render_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}"
                          "{{ eos_token }}{% endfor %}")
    messages = json.dumps([{"role": "user", "content": "hi"}])
    result = run(["render", str(path), "--messages", "-"], stdin=messages)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "<|begin|>user: hi<|end|>"

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(path.read_bytes()[:40])
    result = run(["render", str(broken)])
    assert result.returncode == 1
    assert "corrupt GGUF file" in result.stderr


def test_render_placeholders_for_unset_special_tokens(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ bos_token + messages[0].content + eos_token }}")
    result = run(["render", str(template), "--messages", "-"],
                 stdin=json.dumps([{"role": "user", "content": "x"}]))
    assert result.returncode == 0
    assert result.stdout == "<bos_token>x<eos_token>"
    assert "bos_token, eos_token not set" in result.stderr


def test_render_falls_back_when_the_template_refuses_the_example(tmp_path: Path) -> None:
    template = tmp_path / "strict.jinja"
    template.write_text("{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
                        "{{ raise_exception('only user and assistant') }}{% endif %}"
                        "{{ m.role }};{% endfor %}")
    result = run(["render", str(template)])
    assert result.returncode == 0
    assert result.stdout == "user;assistant;user;"
    assert "only user and assistant" in result.stderr


# ---- errors -----------------------------------------------------------------------------------
def test_template_errors_exit_1_with_one_message(tmp_path: Path) -> None:
    template = tmp_path / "raise.jinja"
    template.write_text("{{ raise_exception('This template refuses everything.') }}")
    result = run(["render", str(template), "--messages", "-"],
                 stdin=json.dumps([{"role": "user", "content": "x"}]))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "This template refuses everything." in result.stderr


def test_data_errors_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    result = run(["render", str(EXAMPLE), "--messages", str(bad)])
    assert result.returncode == 1 and "not valid JSON" in result.stderr
    result = run(["render", str(EXAMPLE), "--messages", "-"], stdin="[]")
    assert result.returncode == 1 and "empty conversation" in result.stderr
    result = run(["render", str(EXAMPLE), "--messages", "-", "--continue-final-message",
                  "--add-generation-prompt"], stdin=json.dumps([{"role": "user", "content": "x"}]))
    assert result.returncode == 1 and "together" in result.stderr


def test_hostile_inputs_exit_non_zero_with_one_line(tmp_path: Path) -> None:
    # (tests/security/test_loading.py has the full set; these go through the real entry point)
    model = tmp_path / "model"
    (model / "additional_chat_templates").mkdir(parents=True)
    (model / "chat_template.jinja").write_text("x")
    (tmp_path / "outside.jinja").write_text("OUTSIDE-TEXT {{")
    os.symlink(tmp_path / "outside.jinja", model / "additional_chat_templates" / "o.jinja")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    nested_gguf = tmp_path / "nested.gguf"
    body = struct.pack("<IQ", 4, 0)
    for _ in range(20):
        body = struct.pack("<IQ", 9, 1) + body
    nested_gguf.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"a"
                            + struct.pack("<I", 9) + body)
    cases = [
        (["render", str(model)], "outside the model folder", 1),
        (["check", str(model)], "outside the model folder", 1),
        (["render", str(EXAMPLE), "--messages", str(deep)], "nested too deeply", 1),
        (["render", str(EXAMPLE), "--var", "x=" + "9" * 5000], "digits", 2),
        (["render", str(nested_gguf)], "deeper than 8 levels", 1),
    ]
    for args, message, code in cases:
        result = run(args)
        assert result.returncode == code, (args, result.stderr)
        assert result.stdout == "" and "OUTSIDE-TEXT" not in result.stderr
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
        assert result.stderr.startswith("minijinja-py: error: ")


def test_lone_surrogates_are_written_as_escapes(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0].content }}")
    result = run(["render", str(template), "--messages", "-"],
                 stdin='[{"role": "user", "content": "\\udc80!"}]')
    assert result.returncode == 0
    assert result.stdout == "\\udc80!"
    assert "1 lone surrogate" in result.stderr


@pytest.mark.parametrize("args,message", [
    ([], "required"),
    (["render"], "required"),
    (["render", "/no/such/template.jinja"], "no such file"),
    (["render", str(EXAMPLE), "--var", "x=abc"], "is not JSON"),
    (["render", str(EXAMPLE), "--var", "novalue"], "KEY=JSON"),
    (["render", str(EXAMPLE), "--var", "tools=[]"], "--tools"),
    (["render", str(EXAMPLE), "--now", "yesterday"], "ISO"),
    (["render", str(EXAMPLE), "--messages", "/no/such.json"], "no such file"),
    (["render", str(EXAMPLE), "--bogus"], "unrecognized"),
    (["frobnicate"], "invalid choice"),
])
def test_usage_errors_exit_2(args: List[str], message: str) -> None:
    result = run(args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr


def test_help_and_version() -> None:
    assert run(["--help"]).returncode == 0
    result = run(["render", "--help"])
    assert result.returncode == 0 and "--messages" in result.stdout
    result = run(["--version"])
    assert result.returncode == 0 and result.stdout.startswith("minijinja-py ")


# ---- check ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_check_lists_what_the_template_reads(command: List[str]) -> None:
    result = run(["check", str(EXAMPLE)], command=command)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"ok: {EXAMPLE} parses\n")
    lines = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
             for line in out.splitlines()[1:] if ":" in line and not line.strip().startswith("note")}
    assert lines["conversation"] == "add_generation_prompt, documents, messages, tools"
    assert lines["other variables"] == "enable_thinking"
    assert lines["message keys"] == "content, reasoning_content, role, tool_calls"
    assert "generation" in lines["statements"] and "macro" in lines["statements"]
    assert "tojson" in lines["filters"]
    assert lines["globals"] == "namespace, raise_exception"


def test_check_json_and_special_tokens(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "bos_token": "<s>"}))
    result = run(["check", str(tmp_path), "--json"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    (entry,) = report["templates"]
    assert entry["variables"] == ["bos_token", "messages"]
    assert entry["message_keys"] == ["content"]
    assert entry["special_tokens"] == {"bos_token": "<s>"}
    text = run(["check", str(tmp_path)]).stdout
    assert "bos_token='<s>'" in text


def test_check_reports_syntax_errors_with_a_caret(tmp_path: Path) -> None:
    template = tmp_path / "broken.jinja"
    template.write_text("{% for m in messages %}\n  {{ m.content }\n{% endfor %}")
    result = run(["check", str(template)])
    assert result.returncode == 1
    assert result.stdout == ""
    assert "syntax error" in result.stderr
    assert "line 2" in result.stderr and "column" in result.stderr
    caret_line = [line for line in result.stderr.splitlines() if line.strip() == "^"]
    assert len(caret_line) == 1
    source_line = result.stderr.splitlines()[result.stderr.splitlines().index(caret_line[0]) - 1]
    assert source_line.strip() == "{{ m.content }"

    json_result = run(["check", str(template), "--json"])
    assert json_result.returncode == 1
    (entry,) = json.loads(json_result.stdout)["templates"]
    assert entry["ok"] is False and entry["lineno"] == 2


def test_check_every_named_template(tmp_path: Path) -> None:
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": [
        {"name": "default", "template": "{{ messages }}"},
        {"name": "tool_use", "template": "{% if tools %}"}]}))
    result = run(["check", str(config)])
    assert result.returncode == 1
    assert f"ok: {config} [default] parses" in result.stdout
    assert f"{config} [tool_use]: syntax error" in result.stderr
