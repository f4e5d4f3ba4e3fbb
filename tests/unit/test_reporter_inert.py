"""What a command reports while it works quotes nodes and the provider (an SSH error, a tag): through
the CLI's context it reaches the terminal inert, like the rest of the cluster's text."""
from __future__ import annotations

import io

from click.testing import CliRunner

from xeoncluster.cli.group import command_context
from xeoncluster.core.progress import Reporter
from xeoncluster.runs.display import inert

HOSTILE = "lost node1: \x1b]52;c;aGk=\x07 [/b] \x1b[2J"


def test_a_warning_quoting_the_cluster_is_inert_on_a_terminal_and_off_it() -> None:
    for fancy in (True, False):
        stream = io.StringIO()
        reporter = Reporter(stream=stream, fancy=fancy)
        reporter.shown = inert
        reporter.warn(HOSTILE)
        reporter.info(HOSTILE)
        out = stream.getvalue()
        assert "\x1b]" not in out and "\x1b[2J" not in out and "\x07" not in out, (fancy, out)
        assert "[/b]" in out


def test_the_cli_s_context_gives_its_reporter_the_door() -> None:
    import click

    seen: list[Reporter] = []

    @click.command()
    @click.pass_context
    def probe(ctx: click.Context) -> None:
        seen.append(command_context(ctx, {"provider": "local", "name": "probe"}).reporter)

    assert CliRunner().invoke(probe, []).exit_code == 0
    assert seen[0].shown is inert
