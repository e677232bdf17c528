"""Client-side validation of names and subjects, run before anything is sent."""

from __future__ import annotations

import re
from typing import Final

from ._errors import InvalidNameError, InvalidSubjectError

MAX_NAME_LEN: Final = 255

# Dots, wildcards, path separators, whitespace and control characters.
_BAD_NAME_CHARS: Final = re.compile(r"[.*>/\\\s\x00-\x1f\x7f]")
# Whitespace and control characters (CR, LF, NUL, tab, ...).
_BAD_SUBJECT_CHARS: Final = re.compile(r"[\s\x00-\x1f\x7f]")


def validate_name(name: object, kind: str = "stream") -> str:
    """Validate a stream or consumer name and return it.

    Names must be non-empty strings of at most 255 characters with no ``.``,
    ``*``, ``>``, whitespace, control characters or path separators.

    Raises:
        InvalidNameError: the name is not valid.

    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"{kind} name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LEN:
        raise InvalidNameError(f"{kind} name is longer than {MAX_NAME_LEN} characters")
    bad = _BAD_NAME_CHARS.search(name)
    if bad is not None:
        raise InvalidNameError(
            f"invalid {kind} name {name!r}: it may not contain {bad.group()!r} "
            "('.', '*', '>', whitespace, control characters and path separators are not allowed)"
        )
    return name


def validate_publish_subject(subject: object) -> str:
    """Validate a subject to publish to and return it.

    The subject must be non-empty, contain no whitespace or control characters
    (CR, LF, NUL, ...), no empty tokens and no wildcard tokens.

    Raises:
        InvalidSubjectError: the subject is not valid for publishing.

    """
    if not isinstance(subject, str) or not subject:
        raise InvalidSubjectError(f"subject must be a non-empty string, got {subject!r}")
    if _BAD_SUBJECT_CHARS.search(subject):
        raise InvalidSubjectError(
            f"invalid subject {subject!r}: whitespace and control characters are not allowed"
        )
    for token in subject.split("."):
        if not token:
            raise InvalidSubjectError(f"invalid subject {subject!r}: empty token")
        if token in ("*", ">"):
            raise InvalidSubjectError(
                f"invalid subject {subject!r}: wildcards are not allowed when publishing"
            )
    return subject


def validate_filter_subject(subject: object) -> str:
    """Validate a subject filter (wildcards allowed, ``>`` only as the last token).

    Raises:
        InvalidSubjectError: the filter is not valid.

    """
    if not isinstance(subject, str) or not subject:
        raise InvalidSubjectError(f"subject filter must be a non-empty string, got {subject!r}")
    if _BAD_SUBJECT_CHARS.search(subject):
        raise InvalidSubjectError(
            f"invalid subject filter {subject!r}: whitespace and control characters are not allowed"
        )
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise InvalidSubjectError(f"invalid subject filter {subject!r}: empty token")
        if token == ">" and i != len(tokens) - 1:
            raise InvalidSubjectError(
                f"invalid subject filter {subject!r}: '>' must be the last token"
            )
    return subject
