"""``apply_chat_template``: the one call that renders a conversation, or renders and encodes it.

It takes whatever a caller has (a template source, a :class:`~.pipeline.ChatTemplate`, a
tokenizer config, a model folder or file, a :class:`~.tokens.ChatTokenizer`) and hands the
call to the render pipeline (:mod:`.pipeline`, ``tokenize=False``) or to the tokenizer layer
(:mod:`.tokens`, ``tokenize=True``). It sits above both, so that neither imports the other
upward; the tokenizer layer is imported only when a call needs it.
"""

from __future__ import annotations

import os
import sys
from collections import abc

from .pipeline import PATH_SUFFIXES, ChatTemplate, _the_conversation, names_a_path

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - what static analysis sees
    from typing import Any, Dict, Mapping, Optional, Sequence, Union

    from .pipeline import Now, PathLike
    from .tokens import ChatTokenizer

__all__ = ["apply_chat_template"]


def _model_path(value: Any) -> Union[None, str, "os.PathLike[str]"]:
    """The path ``value`` names (see :func:`names_a_path`), None when it is not one (a template
    source, a config dict, a ChatTemplate...). A path-like string that names nothing is a
    FileNotFoundError naming it: a typo must not render as a template."""
    if isinstance(value, os.PathLike):
        return value
    if not isinstance(value, str) or not names_a_path(value):
        return None
    if not os.path.exists(value):
        import errno

        reason = (f"it ends in {os.path.splitext(value)[1]}" if value.endswith(PATH_SUFFIXES)
                  else "it holds no {{, {% or {#")
        raise FileNotFoundError(errno.ENOENT, "No such file or directory (taken as a model "
                                f"folder or file, not as a template source: {reason})", value)
    return value


def tokenizer_folder(value: Any) -> Union[str, "os.PathLike[str]"]:
    """The model folder (or tokenizer file) ``value`` names for ``tokenize=True``: a
    FileNotFoundError when it names nothing, a TypeError when it is not a path (a template
    source or a config has no tokenizer). Shared with ``RenderPool.encode``, which must
    refuse what this function refuses, with the same errors."""
    path = _model_path(value)
    if path is None:
        raise TypeError("tokenize=True needs a model folder (with tokenizer.json) or a "
                        "ChatTokenizer as the first argument, not a "
                        f"{type(value).__name__} (a template source or config "
                        "has no tokenizer: pass it as chat_template= with the folder)")
    return path


def _is_chat_tokenizer(value: Any) -> bool:
    # Until the tokenizer layer is imported no ChatTokenizer exists: a plain render does not
    # import it (see the imports at the top)
    tokens = sys.modules.get(f"{__package__}.tokens")
    return tokens is not None and isinstance(value, tokens.ChatTokenizer)


def apply_chat_template(source_or_config: Union[str, PathLike, Mapping[str, Any], ChatTemplate,
                                              "ChatTokenizer"],
                        /, messages: Any = None, tools: Optional[Sequence[Any]] = None,
                        documents: Optional[Sequence[Any]] = None,
                        add_generation_prompt: bool = False,
                        continue_final_message: Union[bool, str] = False, *,
                        conversation: Any = None,
                        template_name: Optional[str] = None, now: Now = None,
                        chat_template: Optional[str] = None, tokenize: bool = False,
                        return_dict: bool = True, return_assistant_tokens_mask: bool = False,
                        sanitize_control_tokens: bool = False,
                        padding: Union[bool, str] = False, truncation: Any = False,
                        max_length: Optional[int] = None, return_tensors: Any = None,
                        tokenizer_kwargs: Optional[Mapping[str, Any]] = None,
                        **template_kwargs: Any) -> Any:
    """Render ``messages`` in one call (see :meth:`ChatTemplate.render`), or, with
    ``tokenize=True``, render and encode them like transformers'
    ``tokenizer.apply_chat_template`` (see
    :meth:`minijinja_py.chat.tokens.ChatTokenizer.apply_chat_template`). The messages may also
    be given as ``conversation=``, transformers' name for them.

    ``source_or_config`` is a template source string, a :class:`ChatTemplate`, a tokenizer
    config dict, a path (model directory, ``tokenizer_config.json``, ``.jinja``, ``.gguf``) or a
    :class:`~minijinja_py.chat.tokens.ChatTokenizer`. A string is a path when it ends in
    ``.jinja``, ``.json`` or ``.gguf`` or holds no template syntax (``{{``, ``{%``, ``{#``), and
    a template source otherwise (see :func:`names_a_path`); a path that does not exist is a
    FileNotFoundError naming it. ``template_name`` picks a named template of a config;
    ``chat_template`` is a template source used instead of the config's (the config still
    provides the special tokens).

    ``tokenize`` defaults to False here, unlike transformers, so that this function keeps
    returning the prompt string it always returned. With ``tokenize=True`` the first argument
    must be a model folder holding ``tokenizer.json`` (loaded once and cached, see
    :func:`~minijinja_py.chat.tokens.load_tokenizer`) or a ``ChatTokenizer``, the optional
    ``tokenizers`` package must be installed, and the result is a dict-like
    :class:`~minijinja_py.chat.tokens.ChatEncoding` with ``input_ids``, ``attention_mask`` and,
    with ``return_assistant_tokens_mask``, ``assistant_masks`` (the ids alone with
    ``return_dict=False``). As in transformers, ``return_assistant_tokens_mask`` and
    ``sanitize_control_tokens`` need ``tokenize=True`` (ValueError otherwise) and the padding
    options are ignored without it.
    """
    messages = _the_conversation(messages, conversation, "apply_chat_template")
    if return_assistant_tokens_mask and not (return_dict and tokenize):
        raise ValueError("`return_assistant_tokens_mask=True` requires `return_dict=True` and "
                         "`tokenize=True`")
    if sanitize_control_tokens and not tokenize:
        raise ValueError("`sanitize_control_tokens=True` requires `tokenize=True`.")
    path = None if _is_chat_tokenizer(source_or_config) else _model_path(source_or_config)

    if tokenize or _is_chat_tokenizer(source_or_config):
        from .tokens import load_tokenizer

        if _is_chat_tokenizer(source_or_config):
            tokenizer = source_or_config
        else:
            tokenizer = load_tokenizer(tokenizer_folder(source_or_config))
        if chat_template is None and template_name is not None:
            chat_template = template_name
            if template_name not in tokenizer.chat_templates:
                from .config import select_template

                select_template(tokenizer.chat_templates, name=template_name)  # its error
        return tokenizer.apply_chat_template(
            messages, tools=tools, documents=documents, chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, tokenize=tokenize,
            sanitize_control_tokens=sanitize_control_tokens, padding=padding,
            truncation=truncation, max_length=max_length, return_tensors=return_tensors,
            return_dict=return_dict, return_assistant_tokens_mask=return_assistant_tokens_mask,
            tokenizer_kwargs=tokenizer_kwargs, now=now, **template_kwargs)

    if isinstance(source_or_config, ChatTemplate):
        template = source_or_config
        if chat_template is not None:
            template = ChatTemplate(chat_template, now=now,
                                    special_tokens=source_or_config.special_tokens)
    elif path is not None or isinstance(source_or_config, abc.Mapping):
        config = source_or_config if path is None else path
        if chat_template is not None:
            template = ChatTemplate(chat_template, now=now,
                                    special_tokens=_special_tokens_only(config))
        else:
            template = ChatTemplate.from_tokenizer_config(config, name=template_name,
                                                          tools=tools, now=now)
    else:
        template = ChatTemplate(chat_template if chat_template is not None
                                else source_or_config, now=now)
    return template.render(messages, tools=tools, documents=documents,
                           add_generation_prompt=add_generation_prompt,
                           continue_final_message=continue_final_message,
                           **template_kwargs)


def _special_tokens_only(source: Union[PathLike, Mapping[str, Any]]) -> Dict[str, str]:
    """The special tokens of a config, folder or file whose own template is not used (it may
    have none)."""
    from .config import (TOKENIZER_CONFIG_FILE, ChatConfigError, _special_tokens_of,
                         load_chat_config)
    from .files import ModelFolder

    if isinstance(source, abc.Mapping):
        return _special_tokens_of(source)
    try:
        return dict(load_chat_config(source).special_tokens)
    except ChatConfigError:
        directory = os.fspath(source)
        if not os.path.isdir(directory):
            raise
    from pathlib import Path

    config = ModelFolder(Path(directory)).read_json(Path(directory) / TOKENIZER_CONFIG_FILE)
    return _special_tokens_of(config) if isinstance(config, dict) else {}
