"""One time limit for all the probe renders of one question about a template.

``ChatTemplate.capabilities()`` and ``ChatTemplate.response_parser()`` answer by rendering
a handful of short probe conversations, each under the environment's limits. A template slow
enough to stay just under the deadline on every probe would otherwise cost that many times a
render's time limit for one call (a minute and more on an untrusted template in a server). So
the probes of one call share one budget: ``Limits.max_seconds``, the time one render may take.
A probe that exceeds a limit itself is not a missing capability but a refusal: callers let its
:class:`~minijinja_py.LimitExceededError` through after that one probe.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .. import DeadlineExceededError

__all__ = ["ProbesDeadlineExceededError", "ProbeDeadline"]


class ProbesDeadlineExceededError(DeadlineExceededError):
    """The probe renders of one call (:meth:`ChatTemplate.capabilities`,
    :meth:`ChatTemplate.response_parser`) together ran longer than ``Limits.max_seconds``, the
    time one render is allowed: a few renders of short conversations, each under the limits,
    must not add up to many times a render's limit."""


class ProbeDeadline:
    """The shared deadline of one call's probes: :meth:`check` after each render."""

    def __init__(self, template: Any, what: str) -> None:
        #: what the probes are for, in the message ("capability probes", ...)
        self.what = what
        self.max_seconds: Optional[float] = template.environment.limits.max_seconds
        self.deadline = (None if self.max_seconds is None
                         else time.monotonic() + self.max_seconds)
        self.renders = 0

    def check(self) -> None:
        """Count a render; refuse the template once the probes so far took longer than one
        render may."""
        self.renders += 1
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ProbesDeadlineExceededError(
                f"the {self.what} ran longer than {self.max_seconds:g} s (Limits.max_seconds, "
                f"the time limit of one render) after {self.renders} render(s) of short "
                "conversations: the template is too slow to probe")
