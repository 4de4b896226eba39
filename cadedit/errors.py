"""One error hierarchy for cadedit.

Every failure a user can cause or meet is a CadeditError: a one-line message that says what
failed and where, an optional hint that says what to do, and the exit code the CLI returns.
They are raised deep in the stages and formatted only in cli/root.py.
"""

from __future__ import annotations


class CadeditError(Exception):
    """A failure to report to the user as one line, with an exit code and an optional hint."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class DocumentError(CadeditError):
    """A file cannot be read as a text document (missing, a directory, binary, not UTF-8)."""


class ProgramError(CadeditError):
    """An edit program does not parse, or does not fit the document it is applied to."""


class ApplyError(CadeditError):
    """An edit cannot be written safely (the file changed on disk, the write failed)."""


class ModelError(CadeditError):
    """A model cannot be found, loaded or run."""


class BudgetError(CadeditError):
    """Decoding ran out of its token budget before the program was complete."""


class EngineError(CadeditError):
    """A shared inference engine (--engine) cannot be reached or used: down, slow, an HTTP error, a bad answer."""


class ConfigError(CadeditError):
    """Settings in .cadedit.toml / pyproject.toml / the environment are missing or wrong."""


class CheckFailedError(CadeditError):
    """No try produced a candidate that passed its checks (syntax, change, tests): exit code 3."""

    exit_code = 3


class UnplacedError(CheckFailedError):
    """A part of a sketch (cadedit fix --sketch) matches no place of the file, or more than one: nothing is
    guessed, nothing written (exit code 3)."""


class ScopeError(CadeditError):
    """The lines or names that should bound an edit are not in the file (or do not parse as lines)."""


class RetypeBoundError(ScopeError):
    """A plan would make the model retype more than the retype bound (--max-retype) allows."""


class OutputError(CadeditError):
    """Standard output is closed or cannot take the data (a full disk, /dev/full)."""


class NotMechanicalError(CadeditError):
    """A rename or deletion cannot be done exactly without a model (a dynamic use, a name not found, an
    ambiguous one): the message says why, and the model makes the edit instead."""
