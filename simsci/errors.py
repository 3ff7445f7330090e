"""The exceptions simsci raises.

Every error a user can cause is a subclass of :class:`SimsciError` and also of the
builtin it refines (``ValueError``, ``RuntimeError``), so ``except ValueError`` keeps
working for code that does not know simsci. Messages state the rule, what arrived and
the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SimsciError(Exception):
    """Base class of every error simsci raises on purpose."""


class FormatError(SimsciError, ValueError):
    """A trajectory file breaks the format contract (docs/format.md).

    Attributes name where: ``path``, ``field`` (e.g. ``"steps/t"``), ``episode`` (int or
    None) and ``rule`` (a short id such as ``"t-increasing"``).
    """

    def __init__(self, message: str, *, path=None, field=None, episode=None, rule=None):
        super().__init__(message)
        self.path = None if path is None else str(path)
        self.field = field
        self.episode = episode
        self.rule = rule


class SolverError(SimsciError, RuntimeError):
    """An integration failed: step-size underflow, a non-finite state, too many steps.

    ``samples`` lists the batch indices that failed (as far as they can be told apart)
    and ``time`` the time at which the failure was detected.
    """

    def __init__(self, message: str, *, samples=None, time=None):
        super().__init__(message)
        self.samples = [] if samples is None else list(samples)
        self.time = time


class CheckpointError(SimsciError, ValueError):
    """A file that is not a readable simsci checkpoint, or one this simsci cannot use."""


class TrainingError(SimsciError, RuntimeError):
    """Training cannot go on (a non-finite loss or gradient norm); names the step."""


class MissingExtraError(SimsciError, ImportError):
    """An optional package (an extra such as ``simsci[neuralop]``) is not installed; the
    message says what to install. The CLI prints it as one line, not a traceback."""


class UnknownNameError(SimsciError, ValueError):
    """A name that is not in a registry (a system, a solver method, a model...)."""


def unknown_name(what: str, name: str, valid: Iterable[str]) -> UnknownNameError:
    """Build the error for an unknown registry name: lists the valid names, suggests one.

    >>> str(unknown_name("system", "lorenz36", ["lorenz63", "lorenz96"]))[:40]
    "unknown system 'lorenz36'; did you mean "
    """
    valid = sorted(valid)
    close = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    listing = ", ".join(valid) if valid else "(none registered)"
    return UnknownNameError(f"unknown {what} {name!r}{hint} Valid names: {listing}.")
