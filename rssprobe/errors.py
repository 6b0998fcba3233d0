"""The one error type users see: a single line, exit code 2, no traceback."""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """Bad input (file, key, reason). The CLI prints it as one line and exits with code 2.

    The message is made one line here, whatever it quotes (a parser's caret diagram, pyarrow's
    three-line reason): the lines are joined, a diagram's marker lines (carets, tildes) dropped."""

    exit_code = 2

    def __init__(self, message: object = "") -> None:
        super().__init__(one_line(str(message)))


def did_you_mean(word: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """" (did you mean 'show'?)" for a mistyped name close to one of `choices` (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=2, cutoff=0.6) or [
        c for c in sorted(choices) if word and c[:1] == word[:1] and _subsequence(word, c)][:2]  # md -> markdown
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{c}'" for c in close) + "?)"


def _subsequence(short: str, long: str) -> bool:
    rest = iter(long)
    return all(ch in rest for ch in short)


def one_line(text: str) -> str:
    """Several lines as one: stripped, joined by a space; lines of only ^ ~ - (a caret diagram) left out."""
    lines = [line.strip() for line in text.splitlines()]
    return " ".join(line for line in lines if line and line.strip("^~- ")) or text.strip()


def from_validation(label: str, errors: list[dict[str, Any]]) -> UserError:
    """One line from pydantic's errors: 'file: key: reason'. An unknown key is named first,
    since a misspelt key is usually also why a required one is missing."""
    errors = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    reason = {"extra_forbidden": "unknown key", "missing": "required key is missing"}.get(
        err["type"], err["msg"].removeprefix("Value error, "))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return UserError(f"{label}: {key}: {reason}{more}")
