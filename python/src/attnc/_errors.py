"""attnc's exception and warning classes (the extension raises AttncError too)."""

from __future__ import annotations

__all__ = ["AttncError", "AttncWarning"]


class AttncError(RuntimeError):
    """A call into attnc failed.

    ``str(error)`` is attnc's message: for a pattern that does not check, the
    clang-style diagnostics the CLI prints (``fixed.attn:7:35: error: ...``
    with the source line and a caret). ``status`` is the C ABI's
    ``attnc_status`` code and ``status_name`` its name
    (``"ATTNC_ERROR_SHAPE"``); docs/runtime.md lists them.
    """

    def __init__(self, message: str, status: int, status_name: str) -> None:
        super().__init__(message)
        self.status = status
        self.status_name = status_name

    def __repr__(self) -> str:
        return f"AttncError({self.status_name}: {str(self)!r})"


class AttncWarning(UserWarning):
    """A warning the pattern's checker reported (the pattern still compiles)."""


# attnc_status codes (attnc.h) that the pure-Python checks raise.
INVALID_ARGUMENT = 1
SHAPE = 5
DTYPE = 6
STRIDE = 7
UNSUPPORTED = 9

_NAMES = {
    INVALID_ARGUMENT: "ATTNC_ERROR_INVALID_ARGUMENT",
    SHAPE: "ATTNC_ERROR_SHAPE",
    DTYPE: "ATTNC_ERROR_DTYPE",
    STRIDE: "ATTNC_ERROR_STRIDE",
    UNSUPPORTED: "ATTNC_ERROR_UNSUPPORTED",
}


def error(status: int, message: str) -> AttncError:
    """An AttncError for one of the codes above."""
    return AttncError(message, status, _NAMES[status])
