"""The one door for text from the cluster or storage on its way to the terminal: log lines, a run's
task, error and restart reasons, metrics, swept values, node names, the watch's status.

The master runs the user's script, so any of it may hold terminal control sequences: OSC 52 writes
the clipboard, OSC 0 sets the title, `ESC[2J` clears the screen, DCS talks to the terminal itself.

- `inert(text)` keeps printable text, tab, and SGR colours (`ESC[` digits and `;` only, then `m`).
  Every other control character becomes a visible marker, so a sequence it started is plain text:
  C0 and DEL become their Unicode control pictures (ESC is `␛`, BEL `␇`, CR `␍`, BS `␈`, LF `␊`),
  C1 (U+0080-U+009F, the 8-bit CSI and OSC among them) becomes `\\x9b`-style text.
  `ESC]52;c;aGk=BEL` shows as `␛]52;c;aGk=␇`.
- The rule for rich: cluster text never reaches rich as a markup string. Rich gets `shown(text)`,
  a `Text` (never read as markup; its SGR colours become rich styles), or `inert(text)` printed with
  markup=False. `[/b]` cannot raise MarkupError and `[link=...]` cannot become an OSC 8 link.
"""
from __future__ import annotations

import re

from rich.text import Text

# A kept SGR sequence, or one control character outside it (tab stays).
_SEQUENCE = re.compile(r"(\x1b\[[0-9;]*m)|([\x00-\x08\x0a-\x1f\x7f-\x9f])")
_DEL_PICTURE = "\u2421"
_C0_PICTURES = 0x2400


def _marker(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(_C0_PICTURES + code)
    return _DEL_PICTURE if code == 0x7f else f"\\x{code:02x}"


def _replace(match: re.Match[str]) -> str:
    return match.group(1) or _marker(match.group(2))


def inert(text: str | bytes) -> str:
    """`text` with SGR colours and printable text kept and every other control character shown as a
    marker; bytes are decoded as UTF-8 with replacement."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return _SEQUENCE.sub(_replace, text)


def shown(text: str | bytes) -> Text:
    """`inert(text)` as a rich Text: printed or put in a table, it is never read as markup."""
    return Text.from_ansi(inert(text), end="")
