"""``minijinja-py inspect``: the capability table of a .jinja file, a model folder or a GGUF
file, as JSON too, and the same one-line errors as ``render`` for bad input (issue 38, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import minijinja_py as mj

from test_cli import EXAMPLE, run, write_tiny_gguf

TOOL_TEMPLATE = ("{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}"
                 "{% for m in messages %}{% if m.role == 'system' %}"
                 "{{ raise_exception('no system messages') }}{% endif %}"
                 "{{ bos_token }}{{ m.content }}{% endfor %}")


def test_inspect_a_jinja_file():
    result = run(["inspect", str(EXAMPLE)])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(EXAMPLE)
    table = {line.split()[0]: line.split(None, 2)[1:] for line in lines[1:]}
    caps = mj.ChatTemplate(EXAMPLE.read_text(encoding="utf-8")).capabilities()
    for name, value in caps.to_dict().items():
        shown = json.dumps(value) if isinstance(value, str) else str(value).lower()
        assert table[name][0] == shown
        assert table[name][1] == caps.witness(name)["summary"].replace("\n", "\\n")
    assert "messages[0].content wrote 'System needle S7'" in table["supports_system_role"][1]
    parser = mj.ChatTemplate(EXAMPLE.read_text(encoding="utf-8")).response_parser()
    assert table["response_parser"][0] == ('"partial"' if parser.unsupported else '"derived"')
    assert table["response_parser"][1].startswith(
        "reads " + ", ".join(sorted(parser.response_template["fields"])))
    # the example conversation's turns, with reasoning (the template writes only the last's)
    assert table["turns_extend"] == [
        "false", "example conversation, turn 5: messages[2].reasoning_content written in the "
        "render of 5 messages, not in the render of 6"]


def test_inspect_a_model_folder_json_and_vars(tmp_path: Path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": TOOL_TEMPLATE, "bos_token": "<s>"}))
    result = run(["inspect", str(folder), "--json"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["template"] == "default"
    assert report["capabilities"]["supports_tools"] is True
    assert report["capabilities"]["supports_system_role"] is False
    assert report["witnesses"]["supports_system_role"]["summary"] == (
        "system_message: raised TemplateError: no system messages")
    witness = json.loads(run(["inspect", str(folder), "--witness", "supports_tools"]).stdout)
    assert witness["probes"][0]["written"]["tool"]["ranges"][0]["text"] == "probe_tool"
    parser = mj.ChatTemplate(TOOL_TEMPLATE, special_tokens={"bos_token": "<s>"}).response_parser()
    assert report["response_parser"] == {"response_template": parser.response_template,
                                          "unsupported": parser.unsupported}
    assert report["turns_extend"] is False  # the example conversation starts with a system
    assert "no system messages" in report["prefix_report"][0]["plain"]["error"]
    thinking = run(["inspect", str(folder), "--var", "enable_thinking=false", "--json"])
    assert json.loads(thinking.stdout)["capabilities"] == report["capabilities"]


def test_inspect_a_gguf_file(tmp_path: Path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, TOOL_TEMPLATE)
    result = run(["inspect", str(path), "--json"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["capabilities"]["supports_tools"] is True
    witness = json.loads(run(["inspect", str(path), "--witness", "requires_typed_content"]).stdout)
    # the GGUF's own bos token reaches the probes
    assert witness["probes"][0]["output"] == "<|begin|>User needle U1"


def test_bad_input_gets_the_same_one_line_errors_as_render(tmp_path: Path):
    broken = tmp_path / "broken.gguf"
    write_tiny_gguf(broken, TOOL_TEMPLATE)
    broken.write_bytes(broken.read_bytes()[:40])
    syntax = tmp_path / "syntax.jinja"
    syntax.write_text("{% for m in messages %}")
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (tmp_path / "missing.jinja", broken, syntax, empty):
        rendered = run(["render", str(target)])
        inspected = run(["inspect", str(target)])
        assert inspected.returncode == rendered.returncode != 0, target
        assert inspected.stderr == rendered.stderr and inspected.stdout == ""
        # one line, but for a syntax error's location and caret (render's own layout)
        assert inspected.stderr.count("\n") == (4 if target == syntax else 1), target
    unknown = run(["inspect", str(EXAMPLE), "--witness", "supports_magic"])
    assert unknown.returncode == 2 and "no such capability" in unknown.stderr
