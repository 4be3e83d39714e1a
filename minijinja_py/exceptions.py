"""Exception hierarchy, mirroring Jinja2's names.

Every error that leaves ``from_string()`` or ``render()`` is a :class:`TemplateError`.
Python errors raised by operators and builtins (``1 + 'a'``, ``1 // 0``) are re-raised as
subclasses of :class:`TemplateRuntimeError` that *also* derive from the original Python class,
so ``except TypeError`` in caller code keeps working while ``except TemplateError`` catches all.

Raise sites leave the location empty; the evaluator fills in the innermost node's position once
(see :func:`TemplateError._locate`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:  # pragma: no cover
    from typing import Optional

__all__ = [
    "TemplateError",
    "TemplateSyntaxError",
    "TemplateAssertionError",
    "TemplateRuntimeError",
    "UndefinedError",
    "SecurityError",
    "LimitExceededError",
    "SourceTooLargeError",
    "DeadlineExceededError",
    "FilterArgumentError",
    "TemplateTypeError",
    "TemplateValueError",
    "TemplateArithmeticError",
    "TemplateLookupError",
]


class TemplateError(Exception):
    """Base class of every error minijinja_py raises.

    Attributes ``lineno``/``column`` (1-based, or None when unknown), ``name`` (the template
    name given to ``from_string``) and ``source`` (the template source) locate the error.
    """

    def __init__(
        self,
        message: Optional[str] = None,
        lineno: Optional[int] = None,
        column: Optional[int] = None,
        name: Optional[str] = None,
        source: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.show_location = True
        self.lineno = lineno
        self.column = column
        self.name = name
        self.source = source

    def _locate(self, lineno: Optional[int], column: Optional[int]) -> None:
        """Record the innermost position only: an already located error keeps its place."""
        if self.lineno is None and lineno is not None:
            self.lineno = lineno
            self.column = column

    def _attach_source(self, name: Optional[str], source: Optional[str]) -> None:
        if self.name is None:
            self.name = name
        if self.source is None:
            self.source = source

    def __str__(self) -> str:
        message = self.message if self.message is not None else ""
        if self.lineno is None or not self.show_location:
            return message
        where = f'File "{self.name or "<template>"}", line {self.lineno}'
        if self.column is not None:
            where += f", column {self.column}"
        lines = [message, f"  {where}"]
        if self.source is not None:
            source_lines = self.source.splitlines()
            if 0 < self.lineno <= len(source_lines):
                line = source_lines[self.lineno - 1]
                lines.append("    " + line)
                if self.column is not None:
                    lines.append("    " + " " * max(self.column - 1, 0) + "^")
        return "\n".join(lines)


class TemplateSyntaxError(TemplateError):
    """The template source could not be parsed."""


class TemplateAssertionError(TemplateSyntaxError):
    """A template that parses but cannot be compiled (Jinja2's name): an unknown filter or test
    outside an ``if`` that guards it, a block defined twice, ``loop`` assigned in a loop."""


class TemplateRuntimeError(TemplateError):
    """An error while rendering."""


class UndefinedError(TemplateRuntimeError):
    """An undefined value was used in a way that needs a real value."""


class SecurityError(TemplateRuntimeError):
    """The template tried something the sandbox forbids."""


class LimitExceededError(SecurityError):
    """A resource limit of :class:`minijinja_py.Limits` was exceeded."""


class DeadlineExceededError(LimitExceededError):
    """A parse or render ran longer than ``Limits.max_seconds`` (wall-clock time)."""


class SourceTooLargeError(TemplateSyntaxError, LimitExceededError):
    """The template source is longer than ``Limits.max_source_size``: refused before parsing.

    Both a syntax error (the template cannot be used) and a limit error."""


class FilterArgumentError(TemplateRuntimeError):
    """A filter was called with arguments it cannot use."""


# Python's own error classes, wrapped: a template error that still answers to the Python type.
class TemplateTypeError(TemplateRuntimeError, TypeError):
    """A TypeError raised while rendering (e.g. ``1 + 'a'``)."""


class TemplateValueError(TemplateRuntimeError, ValueError):
    """A ValueError raised while rendering (e.g. ``'a'.index('z')``)."""


class TemplateArithmeticError(TemplateRuntimeError, ArithmeticError):
    """ZeroDivisionError, OverflowError and friends raised while rendering."""


class TemplateLookupError(TemplateRuntimeError, LookupError):
    """A KeyError or IndexError raised while rendering."""


_PYTHON_ERROR_MAP = (
    (TypeError, TemplateTypeError),
    (ValueError, TemplateValueError),
    (ArithmeticError, TemplateArithmeticError),
    (LookupError, TemplateLookupError),
)
_WRAPPER_CLASSES: dict = {
    TypeError: TemplateTypeError,
    ValueError: TemplateValueError,
    ArithmeticError: TemplateArithmeticError,
    LookupError: TemplateLookupError,
}


def _wrapper_class(python_class: type) -> type:
    """``Template<Name>`` deriving from TemplateRuntimeError AND the Python class.

    Made once per Python class, so ``except ZeroDivisionError`` still catches ``1 // 0``.
    Classes whose C layout forbids the combination fall back to the nearest family.
    """
    cls = _WRAPPER_CLASSES.get(python_class)
    if cls is not None:
        return cls
    try:
        cls = type(f"Template{python_class.__name__}", (TemplateRuntimeError, python_class),
                   {"__module__": __name__, "__doc__": f"A {python_class.__name__} raised while"
                                                       " rendering."})
    except TypeError:
        cls = TemplateRuntimeError
        for base, template_class in _PYTHON_ERROR_MAP:
            if issubclass(python_class, base):
                cls = template_class
                break
    _WRAPPER_CLASSES[python_class] = cls
    return cls


def wrap_python_error(exc: BaseException) -> TemplateError:
    """Turn a Python exception raised inside the render into a TemplateRuntimeError subclass.

    The message is Python's own, so it reads like Jinja2's error; the original is kept as
    ``__cause__`` by the caller (``raise ... from exc``).
    """
    if isinstance(exc, TemplateError):
        return exc
    if isinstance(exc, RecursionError):
        return LimitExceededError(
            "maximum recursion depth exceeded while rendering (Python's own recursion limit was"
            " reached before Limits.max_recursion; lower that limit or raise Python's)")
    if isinstance(exc, MemoryError):
        return LimitExceededError("out of memory while rendering")
    message = str(exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        message = repr(exc.args[0])
    python_class = type(exc)
    if python_class.__module__ != "builtins":
        python_class = next(c for c in python_class.__mro__ if c.__module__ == "builtins")
    if not issubclass(python_class, Exception):
        python_class = Exception
    cls = _wrapper_class(python_class) if python_class is not Exception else TemplateRuntimeError
    if cls is TemplateRuntimeError and python_class is not Exception:
        message = f"{type(exc).__name__}: {message}"
    err = cls(message)
    err.python_type = type(exc).__name__  # type: ignore[attr-defined]
    return err
