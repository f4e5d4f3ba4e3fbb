"""Shell commands for nodes, built from argv lists: every value is one quoted word, so that a file name,
a run name or a node name can never become shell syntax on a node (`a$(touch x)b.csv` is a file name).

Only the operators between commands (`&&`, `;`, redirections) are written by this code; everything
that comes from a user, a record or another machine goes through `word`.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class HomePath:
    """A path under the node's login home. As a word, `"$HOME"/'REST'`: the node's shell expands its
    home (as `~/REST` would) and nothing in REST."""

    relative: str

    def __truediv__(self, part: str) -> HomePath:
        return HomePath(f"{self.relative}/{part}")

    def word(self) -> str:
        return '"$HOME"/' + shlex.quote(self.relative)


Word = str | HomePath


def word(value: Word) -> str:
    return value.word() if isinstance(value, HomePath) else shlex.quote(value)


def remote_command(*argv: Word) -> str:
    """One simple command, each argument one word whatever it holds."""
    if not argv:
        raise ValueError("a remote command needs at least a program")
    return " ".join(word(arg) for arg in argv)


def all_of(*commands: str) -> str:
    """Each command only when every one before it succeeded."""
    return " && ".join(commands)


def in_turn(*commands: str) -> str:
    """Each command whatever the ones before it did."""
    return "; ".join(commands)


def quietly(command: str) -> str:
    """The command with its complaints dropped and its failure ignored (a probe: absent is an answer)."""
    return f"{command} 2>/dev/null || true"


def written_to(command: str, path: Word) -> str:
    """The command's output into the file `path`."""
    return f"{command} > {word(path)}"
