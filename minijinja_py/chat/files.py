"""Reading the files of a model folder safely: what every chat module that opens a model's
files goes through (config.py for tokenizer configs and templates, gguf.py, tokens.py for
tokenizer.json).

A model folder is untrusted input: only regular files are read (never a FIFO, device or socket,
which are refused from ``stat()`` and opened non-blocking besides), only files that resolve inside
the folder (symlinks within it are fine, and in a Hugging Face cache snapshot the repository's
``blobs/`` too), at most :data:`MAX_CONFIG_BYTES` per JSON file, ``Limits.max_source_size``
characters per template file and :data:`MAX_FOLDER_BYTES` in all. Every refusal, and every
unreadable, non-UTF-8 or invalid (too deep, huge-integer) JSON file, is a
:class:`ChatConfigError` naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Optional, Tuple

#: Most bytes read from one JSON file of a model folder (tokenizer_config.json and friends).
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Most bytes read from one model folder in all (its config and template files together).
MAX_FOLDER_BYTES = 64 * 1024 * 1024


class ChatConfigError(ValueError):
    """A tokenizer config, model directory or GGUF file has no usable chat template, the
    requested named template does not exist, or a file of the model folder is refused (not a
    regular file, outside the folder, too large, not UTF-8, not valid JSON). The message names
    the file."""


# ---- reading files safely ---------------------------------------------------------------------
# A model folder is untrusted input too. Only regular files are read (a FIFO would block, a
# device such as /dev/zero would never end), only files that resolve inside the folder (a
# symlink to ~/.ssh/id_rsa must not end up in a prompt or an error's caret line), and never more
# than a cap: the size is checked with fstat before reading and at most cap + 1 bytes are read.

# O_NONBLOCK: should a FIFO appear between the stat() and the open() (a race), the open still
# returns at once and fstat() refuses it. O_NOFOLLOW: the path opened is already resolved, so a
# symlink swapped in for its last component is refused rather than followed.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def template_char_cap() -> int:
    from ..guard.limits import Limits

    return Limits().max_source_size


def read_regular(resolved: str, shown: Path, cap: int, what: str, head: bool = False) -> bytes:
    """The bytes of the regular file at ``resolved`` (a path without symlinks), named ``shown``
    in errors: refused when longer than ``cap`` bytes, or only its first ``cap`` bytes when
    ``head``."""
    try:
        fd = os.open(resolved, _OPEN_FLAGS)
    except OSError as exc:
        raise ChatConfigError(f"{shown}: cannot read it ({os_reason(exc)})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ChatConfigError(f"{shown}: refused: {file_kind(status.st_mode)}, not a "
                                  "regular file")
        if status.st_size > cap and not head:
            raise ChatConfigError(f"{shown}: refused: {status.st_size:,} bytes, more than the "
                                  f"{cap:,} read for {what}")
        chunks = []
        remaining = cap if head else cap + 1
        # The size fstat gave in one read, then small ones up to the end (or past the cap, if
        # the file grew): b"".join returns a lone chunk as it is, where joining many holds
        # the file twice (a 500 MB tokenizer.json).
        size = min(remaining, max(status.st_size + 1, 1 << 20))
        while remaining > 0:
            chunk = os.read(fd, size)
            size = min(remaining - len(chunk), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining <= 0 and not head:  # the file grew while it was read
            raise ChatConfigError(f"{shown}: refused: more than the {cap:,} bytes read for "
                                  f"{what}")
        return b"".join(chunks)
    except OSError as exc:
        raise ChatConfigError(f"{shown}: cannot read it ({os_reason(exc)})") from None
    finally:
        os.close(fd)


def _is_within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


class ModelFolder:
    """The files of one model folder, read under the rules above.

    A file may be a symlink as long as it resolves inside the folder; in a Hugging Face hub
    cache snapshot (``models--org--name/snapshots/<revision>/``, whose files are symlinks to
    ``../../blobs/<hash>``) the repository's own ``blobs`` directory counts as inside too.
    Reads from one folder add up to at most :data:`MAX_FOLDER_BYTES`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        real = os.path.realpath(directory)
        self.roots = [real]
        snapshots = os.path.dirname(real)
        repository = os.path.dirname(snapshots)
        if os.path.basename(snapshots) == "snapshots" and "--" in os.path.basename(repository):
            self.roots.append(os.path.realpath(os.path.join(repository, "blobs")))
        self.budget = MAX_FOLDER_BYTES

    def contains(self, real: str) -> bool:
        return any(_is_within(real, root) for root in self.roots)

    def resolve(self, path: Path) -> Optional[Tuple[str, os.stat_result]]:
        """``(resolved path, stat)`` of a name in the folder, None when nothing has that name;
        refuses names that lead outside the folder (or nowhere)."""
        try:
            os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ChatConfigError(f"{path}: cannot read it ({os_reason(exc)})") from None
        real = os.path.realpath(path)
        if not self.contains(real):
            raise ChatConfigError(f"{path}: refused: it is a symbolic link that leads outside "
                                  f"the model folder {self.directory}")
        try:
            return real, os.stat(real)
        except FileNotFoundError:
            raise ChatConfigError(f"{path}: refused: a symbolic link to a file that does not "
                                  "exist") from None
        except OSError as exc:
            raise ChatConfigError(f"{path}: cannot read it ({os_reason(exc)})") from None

    def read(self, path: Path, cap: int, what: str) -> Optional[bytes]:
        """The bytes of the regular file ``path`` inside the folder, None when it is absent."""
        found = self.resolve(path)
        if found is None:
            return None
        real, status = found
        if not stat.S_ISREG(status.st_mode):
            raise ChatConfigError(f"{path}: refused: {file_kind(status.st_mode)}, not a "
                                  "regular file")
        if self.budget <= 0 or status.st_size > self.budget:
            raise ChatConfigError(f"{path}: refused: the files read from the model folder "
                                  f"{self.directory} add up to more than {MAX_FOLDER_BYTES:,} "
                                  "bytes")
        data = read_regular(real, path, min(cap, self.budget), what)
        self.budget -= len(data)
        return data

    def read_json(self, path: Path) -> Any:
        data = self.read(path, MAX_CONFIG_BYTES, "a JSON config")
        return None if data is None else parse_json(data, path)

    def read_template(self, path: Path) -> Optional[str]:
        chars = template_char_cap()
        data = self.read(path, 4 * chars, "a template")
        return None if data is None else decode_template(data, path, chars)


def decode_template(data: bytes, path: Path, max_chars: int) -> str:
    # Like transformers: UTF-8, universal newlines (a CRLF .jinja renders as its LF twin).
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                              f"{exc.start:,})") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if len(text) > max_chars:
        raise ChatConfigError(f"{path}: refused: the template is {len(text):,} characters long, "
                              f"more than Limits.max_source_size ({max_chars:,})")
    return text


def parse_json(data: bytes, path: Path) -> Any:
    """JSON text to data; every problem is a ChatConfigError naming the file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChatConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte "
                              f"{exc.start:,})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ChatConfigError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ChatConfigError(f"{path}: refused: its JSON is nested too deeply to "
                              "read") from None
    except ValueError as exc:  # e.g. Python's limit on the digits of an integer
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ChatConfigError(f"{path}: cannot read its JSON ({reason})") from None
