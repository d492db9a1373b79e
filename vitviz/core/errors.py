"""VitvizError: the one base of every error a user's input can cause (a file, a setting).

Its message is one plain, printable line saying what was wrong and what is accepted; the CLI
prints it after ``vitviz-cli:``, the window in its message bar. Anything else that escapes is a
bug in vitviz, not the user's file.
"""

from __future__ import annotations

from vitviz.core.printable import printable


class VitvizError(ValueError):
    """An input vitviz can't use. The message is made printable (a file name with a newline or
    bytes that are not UTF-8 in it can't split it or make it unprintable)."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(printable(str(message)), *args)
