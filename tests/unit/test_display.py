"""The display door (runs/display.py): text from the cluster reaches the terminal with its SGR colours and
printable text, every other control sequence shown as a marker, and rich never reads it as markup."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table

from xeoncluster.runs.display import inert, shown

SGR = re.compile(r"\x1b\[[0-9;]*m")

DANGEROUS = {
    "OSC 52 clipboard": ("\x1b]52;c;aGk=\x07", "␛]52;c;aGk=␇"),
    "OSC 0 title, ST": ("\x1b]0;owned\x1b\\", "␛]0;owned␛\\"),
    "DCS": ("\x1bP$q m\x1b\\", "␛P$q m␛\\"),
    "clear screen": ("\x1b[2J", "␛[2J"),
    "cursor home": ("\x1b[H", "␛[H"),
    "8-bit CSI": ("\x9b2J", "\\x9b2J"),
    "8-bit OSC": ("\x9d0;t\x9c", "\\x9d0;t\\x9c"),
    "APC": ("\x1b_x\x1b\\", "␛_x␛\\"),
    "lone ESC": ("a\x1b", "a␛"),
    "BEL": ("\x07", "␇"),
    "CR": ("fake\rreal", "fake␍real"),
    "BS": ("ab\b\bxy", "ab␈␈xy"),
    "NUL and DEL": ("\x00\x7f", "␀␡"),
    "LF": ("one\ntwo", "one␊two"),
    "SGR with a colon is no plain SGR": ("\x1b[38:5:1m", "␛[38:5:1m"),
}


@pytest.mark.parametrize("name", DANGEROUS)
def test_every_control_but_sgr_becomes_a_visible_marker(name: str) -> None:
    raw, marked = DANGEROUS[name]
    assert inert(raw) == marked
    assert "\x1b" not in inert(raw) and not re.search(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]", inert(raw))


def test_sgr_colours_tab_and_printable_text_stay() -> None:
    for text in ("\x1b[31mred\x1b[0m", "\x1b[1;38;5;208mbold orange\x1b[m", "a\tb", "step 3/10 loss 0.5 é ✓"):
        assert inert(text) == text


def test_bytes_are_decoded_with_replacement() -> None:
    assert inert(b"caf\xe9 \x1b[2J") == "caf\ufffd ␛[2J"


def printed(*things: object) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, highlight=False, width=200, color_system="standard")
    for thing in things:
        console.print(thing)
    return out.getvalue()


def only_sgr(output: str) -> bool:
    return "\x1b" not in SGR.sub("", output) and not re.search(r"[\x80-\x9f]", output)


@pytest.mark.parametrize("markup", ["[/b]", "[link=http://x]click[/link]", "[bold red]x", "[/x] \\[b]"])
def test_markup_is_literal_text_through_rich(markup: str) -> None:
    table = Table("task")
    table.add_row(shown(markup))
    output = printed(shown(markup), table)
    assert output.count(markup) == 2
    assert "\x1b]8;" not in output and only_sgr(output)


def test_dangerous_sequences_through_rich_leave_only_sgr() -> None:
    text = "".join(raw for raw, _ in DANGEROUS.values()) + " \x1b[31mred\x1b[0m"
    output = printed(shown(text))
    assert only_sgr(output) and "␛]52;c;aGk=␇" in output
    assert "\x1b[31mred\x1b[0m" in output  # the colour is rich's own style now, drawn the same
