"""Extract google/minja's capability and polyfill expectations into JSON fixtures.

    python tools/minja_expectations.py MINJA_GIT_DIR LLAMA_CPP_GIT_DIR [--out tests/fixtures/minja]

MINJA_GIT_DIR is a clone (or bare mirror) of github.com/google/minja, LLAMA_CPP_GIT_DIR one of
llama.cpp (or a fork with the same ``models/templates``). The expected values are read from
minja's ``tests/test-capabilities.cpp`` (the ``EXPECT_TRUE``/``EXPECT_FALSE`` of each
``TEST(CapabilitiesTest, ...)``; commented-out lines are not expectations) and
``tests/test-polyfills.cpp`` (each ``EXPECT_EQ`` string and ``ThrowsWithSubstr`` text, with the
template macros and files they render); nothing expected is written by hand. The inputs of
the polyfill tests (the C++ ``json`` constants) are transcribed below, beside the C++ they
come from.

minja's tests read the Hub's templates, which its repository does not hold: each is looked up
by file name in minja's ``tests_files/``, then in llama.cpp's ``models/templates/`` (where
llama.cpp keeps the same files), then under SUBSTITUTES (a listed stand-in, recorded as such).
Templates found nowhere are listed with ``"template": null``. Found templates are copied into
``<out>/templates/`` and their origin (repository, commit, path, sha256) recorded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

#: minja's file name -> a file llama.cpp keeps instead (recorded in the fixture as substituted)
SUBSTITUTES = {
    # llama.cpp keeps the 8B model's tool_use template; minja's test reads the 70B model's
    "NousResearch-Hermes-3-Llama-3.1-70B-tool_use.jinja":
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
}

# ---- the inputs of tests/test-polyfills.cpp (C++ json constants, transcribed) ---------------
# nlohmann::ordered_json keeps keys in the order written; where a constant repeats a key
# (message_assistant_call_id, message_assistant_call_idx) the first one is kept, as emplace does.
_CALL = {"type": "function",
         "function": {"name": "special_function", "arguments": "{\"arg1\": 1}"}}
INPUTS: Dict[str, Any] = {
    "message_user_text": {"role": "user", "content": "I need help"},
    "message_assistant_text": {"role": "assistant", "content": "Hello, world!"},
    "message_system": {"role": "system", "content": "I am The System!"},
    "message_assistant_call": {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    "message_assistant_call_id": {"role": "assistant", "content": None,
                                  "tool_calls": [{**_CALL, "id": "123456789"}]},
    "message_assistant_call_idx": {"role": "assistant", "content": None,
                                   "tool_plan": "I'm not so sure",
                                   "tool_calls": [{**_CALL, "id": "0"}]},
    "message_tool": {"role": "tool", "content": {"result": 123}, "tool_call_id": "123456789"},
}

_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r"}


def _cpp_string(text: str) -> str:
    """The value of adjacent C++ string literals (``"a" "b"`` is ``ab``)."""
    pieces = []
    for literal in _LITERAL.findall(text):
        pieces.append(re.sub(r"\\(.)", lambda m: _ESCAPES[m.group(1)], literal))
    return "".join(pieces)


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True,
                          capture_output=True, text=True).stdout


def _git_bytes(git_dir: Path, spec: str) -> Optional[bytes]:
    result = subprocess.run(["git", "--git-dir", str(git_dir), "show", spec],
                            capture_output=True)
    return result.stdout if result.returncode == 0 else None


class TemplateFinder:
    """Finds minja's test templates in minja's and llama.cpp's trees and copies them."""

    def __init__(self, minja: Path, llama_cpp: Path, out: Path) -> None:
        self.places = [(minja, "google/minja", "tests_files/"),
                       (llama_cpp, "ggml-org/llama.cpp", "models/templates/")]
        self.commits = {repo: _git(git_dir, "rev-parse", "HEAD").strip()
                        for git_dir, repo, _ in self.places}
        self.out = out
        self.found: Dict[str, Optional[Dict[str, Any]]] = {}

    def find(self, name: str) -> Optional[Dict[str, Any]]:
        if name in self.found:
            return self.found[name]
        record = None
        for candidate in (name, SUBSTITUTES.get(name)):
            if candidate is None or record is not None:
                continue
            for git_dir, repo, folder in self.places:
                data = _git_bytes(git_dir, f"HEAD:{folder}{candidate}")
                if data is None:
                    continue
                (self.out / "templates").mkdir(parents=True, exist_ok=True)
                (self.out / "templates" / candidate).write_bytes(data)
                record = {"file": f"templates/{candidate}", "repo": repo,
                          "commit": self.commits[repo], "path": folder + candidate,
                          "sha256": hashlib.sha256(data).hexdigest(),
                          "substituted_for": name if candidate != name else None}
                break
        self.found[name] = record
        return record


def capability_expectations(minja: Path, finder: TemplateFinder) -> List[Dict[str, Any]]:
    source = _git(minja, "show", "HEAD:tests/test-capabilities.cpp")
    cases = []
    for test, body in re.findall(r"TEST\(CapabilitiesTest, (\w+)\)\s*\{(.*?)\n\}", source, re.S):
        name = re.search(r'get_caps\("tests/([^"]+)"\)', body).group(1)
        expected = {capability: verdict == "TRUE" for verdict, capability in
                    re.findall(r"^\s*EXPECT_(TRUE|FALSE)\(caps\.(\w+)\);", body, re.M)}
        cases.append({"test": f"CapabilitiesTest.{test}", "template_name": name,
                      "template": finder.find(name), "expected": expected})
    return cases


def _macros(source: str) -> Dict[str, str]:
    macros = {}
    for name, body in re.findall(r"#define (TEMPLATE_\w+) \\\n(.*?)\n\n", source, re.S):
        macros[name] = _cpp_string(body)
    return macros


def _split_statements(body: str) -> List[str]:
    """The test body's statements (a statement may span lines; ``;`` inside strings and
    lambdas is kept)."""
    statements, depth, current, in_string, escape = [], 0, [], False, False
    for char in body:
        current.append(char)
        if in_string:
            if escape:
                escape = False
            elif char == "\\":
                escape = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == ";" and depth == 0:
            statements.append("".join(current).strip().rstrip(";").strip())
            current = []
    return [statement for statement in statements if statement]


class _PolyfillTest:
    """Replays one polyfill TEST's statements: templates made, inputs set, outputs expected."""

    def __init__(self, test: str, macros: Dict[str, str], finder: TemplateFinder) -> None:
        self.test = test
        self.macros = macros
        self.finder = finder
        self.templates: Dict[str, Dict[str, Any]] = {}
        self.inputs: Dict[str, Any] = {}
        self.cases: List[Dict[str, Any]] = []

    def run(self, statement: str) -> None:
        made = re.match(r'chat_template (\w+)\((\w+|read_file\("tests/([^"]+)"\)), "([^"]*)", '
                        r'"([^"]*)"\)', statement)
        if made:
            variable, macro, file_name, bos, eos = made.groups()
            template: Dict[str, Any] = {"bos_token": _cpp_string(f'"{bos}"'),
                                        "eos_token": _cpp_string(f'"{eos}"')}
            if file_name:
                template["template_name"] = file_name
                template["template"] = self.finder.find(file_name)
            else:
                template["template_name"] = macro
                template["source"] = self.macros[macro]
            self.templates[variable] = template
            return
        if statement.startswith("auto inputs = chat_template_inputs()"):
            self.inputs = {"messages": [], "tools": None, "add_generation_prompt": True}
            return
        assigned = re.match(r"inputs\.(\w+) = (.*)$", statement, re.S)
        if assigned:
            field, value = assigned.groups()
            if field == "add_generation_prompt":
                self.inputs[field] = value.strip() == "true"
            else:
                names = re.findall(r"\w+", re.sub(r"json::array", "", value))
                self.inputs[field] = [TOOLS[name] if name in TOOLS else INPUTS[name]
                                      for name in names]
            return
        self.expectation(statement)

    def expectation(self, statement: str) -> None:
        equal = re.match(r"EXPECT_EQ\((.*),\s*(\w+)\.apply\(inputs(, options_no_polyfills\(\))?\)\)$",
                         statement, re.S)
        throws = re.match(r'EXPECT_THAT\(\s*\[&\]\(\) \{ (\w+)\.apply\(inputs'
                          r'(, options_no_polyfills\(\))?\); \},\s*ThrowsWithSubstr\((".*")\)\)$',
                          statement, re.S)
        if equal:
            literals, variable, no_polyfills = equal.groups()
            expected: Any = _cpp_string(literals)
        elif throws:
            variable, no_polyfills, literal = throws.groups()
            expected = {"raises_with": _cpp_string(literal)}
        else:
            return
        self.cases.append({"test": self.test, "case": len(self.cases),
                           **self.templates[variable], **json.loads(json.dumps(self.inputs)),
                           "polyfill": not no_polyfills, "expected": expected})


TOOLS: Dict[str, Any] = {}


def polyfill_expectations(minja: Path, finder: TemplateFinder) -> List[Dict[str, Any]]:
    source = _git(minja, "show", "HEAD:tests/test-polyfills.cpp")
    tool = re.search(r'special_function_tool = json::parse\(R"\((.*?)\)"\)', source, re.S)
    TOOLS["special_function_tool"] = json.loads(tool.group(1))
    macros = _macros(source)
    # commented-out tests (/* ... */) are not expectations
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    cases = []
    for group, name, body in re.findall(r"\nTEST\((PolyfillTest|ToolTest), (\w+)\)\s*\{(.*?)\n\}",
                                        source, re.S):
        replay = _PolyfillTest(f"{group}.{name}", macros, finder)
        for statement in _split_statements(body):
            replay.run(statement)
        cases.extend(replay.cases)
    return cases


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("minja", type=Path, help="google/minja git directory")
    parser.add_argument("llama_cpp", type=Path, help="llama.cpp git directory")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/minja"))
    args = parser.parse_args(argv)
    finder = TemplateFinder(args.minja, args.llama_cpp, args.out)
    document = {
        "source": {"minja": {"repo": "google/minja", "commit": finder.commits["google/minja"],
                             "files": ["tests/test-capabilities.cpp",
                                       "tests/test-polyfills.cpp"]},
                   "llama.cpp": {"commit": finder.commits["ggml-org/llama.cpp"],
                                 "note": "models/templates/ of the llama.cpp tree given"}},
        "capabilities": capability_expectations(args.minja, finder),
        "polyfills": polyfill_expectations(args.minja, finder),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "expectations.json", "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, ensure_ascii=False)
        handle.write("\n")
    missing = sorted(name for name, record in finder.found.items() if record is None)
    print(f"{len(document['capabilities'])} capability tests, {len(document['polyfills'])} "
          f"polyfill expectations; templates not found: {', '.join(missing) or 'none'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
