"""Loading chat templates the way transformers does: model folders, tokenizer configs, GGUF.

Loading (:func:`load_chat_config`, behind
:meth:`ChatTemplate.from_tokenizer_config`) follows transformers too: a model directory's
``chat_template.jinja`` and ``additional_chat_templates/*.jinja`` win over the ``chat_template``
of ``tokenizer_config.json``; a list of named templates is selected by name, else ``tool_use`` when
tools are given, else ``default``. GGUF files are read by :mod:`minijinja_py.chat.gguf`.

A model folder is untrusted input: its files are read through :mod:`minijinja_py.chat.files`
(regular files inside the folder only, capped per file and in all); every refusal, and every
unreadable, non-UTF-8 or invalid JSON file, is a :class:`ChatConfigError` naming the file.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .files import (MAX_CONFIG_BYTES, MAX_FOLDER_BYTES, ChatConfigError, ModelFolder,
                    decode_template, file_kind, os_reason, parse_json, read_regular,
                    template_char_cap)

__all__ = ["ChatConfig", "ChatConfigError", "load_chat_config", "select_template",
           "CHAT_TEMPLATE_FILE", "CHAT_TEMPLATE_DIR", "TOKENIZER_CONFIG_FILE",
           "MAX_CONFIG_BYTES", "MAX_FOLDER_BYTES", "SPECIAL_TOKEN_NAMES"]

PathLike = Union[str, "os.PathLike[str]"]

#: The tokenizer attributes passed to templates as variables (transformers' special_tokens_map).
SPECIAL_TOKEN_NAMES: Tuple[str, ...] = ("bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token")

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
LEGACY_CHAT_TEMPLATE_JSON = "chat_template.json"


# ---- loading configs -------------------------------------------------------------------------
@dataclass
class ChatConfig:
    """What a model directory, tokenizer config, template file or GGUF file provides.

    ``templates`` maps names to sources (a single template is ``{"default": source}``);
    ``special_tokens`` maps ``bos_token``/``eos_token``/... to their strings; ``origin`` says
    where it came from (a path, or ``"<dict>"``).
    """

    templates: Dict[str, str]
    special_tokens: Dict[str, str]
    origin: str


def _token_text(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]  # the serialized AddedToken form
    return None


def _special_tokens_of(config: Mapping[str, Any]) -> Dict[str, str]:
    """The named special tokens of a config, as transformers 5 reads them (and passes them to
    templates): the standard ones (:data:`SPECIAL_TOKEN_NAMES`), then the model's own
    (``image_token``...): the entries of an ``extra_special_tokens`` mapping, and every other
    key ending in ``_token`` whose value is a token."""
    tokens = {}
    for key in SPECIAL_TOKEN_NAMES:
        text = _token_text(config.get(key))
        if text is not None:
            tokens[key] = text
    extra = config.get("extra_special_tokens")
    model_own = list(extra.items()) if isinstance(extra, Mapping) else []
    model_own += [(key, value) for key, value in config.items()
                  if isinstance(key, str) and key.endswith("_token")
                  and key not in SPECIAL_TOKEN_NAMES]
    for key, value in model_own:
        # (transformers takes these only as a string or a serialized AddedToken)
        if isinstance(value, str) or (isinstance(value, Mapping)
                                      and value.get("__type") == "AddedToken"):
            text = _token_text(value)
            if text is not None:
                tokens[str(key)] = text
    return tokens


def _extra_special_tokens_of(config: Mapping[str, Any]) -> List[str]:
    """The special tokens a config lists without names: ``extra_special_tokens`` as a list, or
    the older ``additional_special_tokens`` (transformers 5 reads the latter as the former)."""
    extra = config.get("extra_special_tokens")
    if extra is None:
        extra = config.get("additional_special_tokens")
    if not isinstance(extra, (list, tuple)):
        return []
    return [text for text in map(_token_text, extra) if text is not None]


def _templates_of(value: Any, origin: str) -> Dict[str, str]:
    """A config's ``chat_template`` entry (a string, a list of named templates, or a mapping)."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = []
        for index, entry in enumerate(value):
            if not (isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
                    and "template" in entry):
                raise ChatConfigError(f"{origin}: chat_template entry {index} is not a "
                                      '{"name": ..., "template": ...} object')
            items.append((entry["name"], entry["template"]))
    else:
        raise ChatConfigError(f"{origin}: chat_template must be a string or a list of named "
                              f"templates, not {type(value).__name__}")
    templates = {}
    for name, source in items:
        if not isinstance(source, str):
            raise ChatConfigError(f"{origin}: the chat template {name!r} is not a string")
        templates[str(name)] = source
    if not templates:
        raise ChatConfigError(f"{origin}: chat_template is an empty list")
    return templates


def _config_from_dict(config: Mapping[str, Any], origin: str) -> ChatConfig:
    if "chat_template" not in config or config["chat_template"] is None:
        raise ChatConfigError(f"{origin}: no chat_template in this tokenizer config")
    return ChatConfig(_templates_of(config["chat_template"], origin), _special_tokens_of(config),
                      origin)


def _config_from_directory(directory: Path) -> ChatConfig:
    folder = ModelFolder(directory)
    config: Dict[str, Any] = {}
    config_path = directory / TOKENIZER_CONFIG_FILE
    loaded = folder.read_json(config_path)
    if loaded is not None:
        if not isinstance(loaded, dict):
            raise ChatConfigError(f"{config_path}: expected a JSON object")
        config = loaded
    special = _special_tokens_of(config)
    if "added_tokens_decoder" not in config:
        # transformers' legacy path: special_tokens_map.json overrides the config's tokens
        legacy = folder.read_json(directory / SPECIAL_TOKENS_MAP_FILE)
        if isinstance(legacy, dict):
            special.update(_special_tokens_of(legacy))

    # Separate .jinja files win over the config's chat_template.
    templates: Dict[str, str] = {}
    main_source = folder.read_template(directory / CHAT_TEMPLATE_FILE)
    if main_source is not None:
        templates["default"] = main_source
    extra_dir = directory / CHAT_TEMPLATE_DIR
    found = folder.resolve(extra_dir)
    if found is not None and stat.S_ISDIR(found[1].st_mode):
        try:
            names = os.listdir(found[0])
        except OSError as exc:
            raise ChatConfigError(f"{extra_dir}: cannot list it ({os_reason(exc)})") from None
        # what transformers' Path.glob("*.jinja") lists (hidden names included)
        for file_name in sorted(name for name in names if name.endswith(".jinja")):
            source = folder.read_template(extra_dir / file_name)
            if source is not None:
                templates[file_name[:-len(".jinja")]] = source
    if templates:
        return ChatConfig(templates, special, str(directory))

    if config.get("chat_template") is not None:
        return ChatConfig(_templates_of(config["chat_template"], str(config_path)), special,
                          str(directory))
    legacy_json = directory / LEGACY_CHAT_TEMPLATE_JSON
    loaded = folder.read_json(legacy_json)
    if isinstance(loaded, dict) and loaded.get("chat_template") is not None:
        return ChatConfig(_templates_of(loaded["chat_template"], str(legacy_json)), special,
                          str(directory))
    raise ChatConfigError(
        f"{directory}: no chat template found (looked for {CHAT_TEMPLATE_FILE}, "
        f"{CHAT_TEMPLATE_DIR}/*.jinja, and chat_template in {TOKENIZER_CONFIG_FILE})")


def _config_from_gguf(path: Path) -> ChatConfig:
    from .gguf import read_gguf_chat_info

    try:
        info = read_gguf_chat_info(path)
    except OSError as exc:
        raise ChatConfigError(f"{path}: cannot read it ({os_reason(exc)})") from None
    if not info.templates:
        raise ChatConfigError(f"{path}: this GGUF file has no tokenizer.chat_template metadata")
    return ChatConfig(dict(info.templates), dict(info.special_tokens), str(path))


def load_chat_config(path_or_dict: Union[PathLike, Mapping[str, Any]]) -> ChatConfig:
    """Read chat template(s) and special tokens from a model directory, a
    ``tokenizer_config.json`` (path or parsed dict), a ``.gguf`` file or a template file.

    A file is taken as GGUF when its name ends in ``.gguf`` or it starts with the GGUF magic,
    as a JSON config when its name ends in ``.json``, and as a bare template otherwise. A file
    named directly may be a symlink to anywhere (the caller chose it), but it must be a regular
    file and is read under the same size caps as a model folder's files; inside a directory
    only regular files that resolve inside it are read (see the module docstring). Raises
    FileNotFoundError for a missing path and :class:`ChatConfigError` (naming the file) for
    everything refused or unreadable.
    """
    if isinstance(path_or_dict, Mapping):
        return _config_from_dict(path_or_dict, "<dict>")
    if not isinstance(path_or_dict, (str, os.PathLike)):
        raise TypeError("expected a path or a tokenizer config dict, not "
                        f"{type(path_or_dict).__name__}")
    path = Path(path_or_dict)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file or directory: {path}") from None
    except OSError as exc:
        raise ChatConfigError(f"{path}: cannot read it ({os_reason(exc)})") from None
    except ValueError as exc:  # e.g. an embedded NUL byte
        raise ChatConfigError(f"{str(path)!r}: not a usable path ({exc})") from None
    if stat.S_ISDIR(status.st_mode):
        return _config_from_directory(path)
    if not stat.S_ISREG(status.st_mode):
        raise ChatConfigError(f"{path}: refused: {file_kind(status.st_mode)}, not a regular "
                              "file")
    real = os.path.realpath(path)
    if path.suffix.lower() == ".gguf" or read_regular(real, path, 4, "", head=True) == b"GGUF":
        return _config_from_gguf(path)
    if path.suffix.lower() == ".json":
        loaded = parse_json(read_regular(real, path, MAX_CONFIG_BYTES, "a JSON config"), path)
        if not isinstance(loaded, dict):
            raise ChatConfigError(f"{path}: expected a JSON object (a tokenizer config)")
        if loaded.get("chat_template") is None:
            hint = ""
            if (path.parent / CHAT_TEMPLATE_FILE).is_file():
                hint = (f"; the template is in {CHAT_TEMPLATE_FILE} next to it: pass the "
                        f"directory {path.parent} instead")
            raise ChatConfigError(f"{path}: no chat_template in this tokenizer config{hint}")
        return ChatConfig(_templates_of(loaded["chat_template"], str(path)),
                          _special_tokens_of(loaded), str(path))
    chars = template_char_cap()
    source = decode_template(read_regular(real, path, 4 * chars, "a template"), path, chars)
    return ChatConfig({"default": source}, {}, str(path))


def select_template(templates: Union[str, Mapping[str, str]], name: Optional[str] = None,
                    tools: Any = None) -> Tuple[str, str]:
    """Pick one template as transformers does: ``(name, source)``.

    ``name`` wins when given; otherwise ``"tool_use"`` when ``tools`` is not None and present,
    else ``"default"``. Raises :class:`ChatConfigError` listing the available names when the
    choice does not exist.
    """
    if isinstance(templates, str):
        templates = {"default": templates}
    names = sorted(templates)
    if name is not None:
        if name in templates:
            return name, templates[name]
        raise ChatConfigError(f"no chat template named {name!r}; available: "
                              f"{', '.join(map(repr, names))}")
    if tools is not None and "tool_use" in templates:
        return "tool_use", templates["tool_use"]
    if "default" in templates:
        return "default", templates["default"]
    raise ChatConfigError("this config has several chat templates and none is called "
                          f"'default': choose one by name ({', '.join(map(repr, names))})")


