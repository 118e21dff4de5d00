"""CI runs what the README asks of a user and nothing else: a dependency that only `.ci/run` provided would be
invisible to CI and break a newcomer's first command (the test bed's base image was one)."""

from __future__ import annotations

import re
import shlex

from reward_testing.paths import REPO

CI = REPO / ".ci" / "run"
# make at a command's start: a line's, after a shell operator or quote, or after a prefix that runs it
MAKE_COMMAND = re.compile(r"(?:^|[;&|({'\"]\s*|\b(?:timed|nice(?:\s+-n\s*\d+)?|setsid|time)\s+)(make(?:\s+[\w.=/-]+)*)")


def readme_commands() -> list[str]:
    """The commands of the README's set-up block (its "Two commands"), comments dropped."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Two commands\n+```sh\n(.*?)```", readme, re.S)
    assert block, "the README's set-up block (## Two commands, a sh block) is missing"
    return [line.split("#", 1)[0].strip() for line in block[1].splitlines() if line.split("#", 1)[0].strip()]


def ci_commands(script: str) -> list[str]:
    """Every make command the script runs, in order: its own lines and those it times, the EXIT trap's too."""
    commands = []
    for line in script.splitlines():
        code = line.split("#", 1)[0].strip()
        for found in MAKE_COMMAND.finditer(code):
            words = [word for word in shlex.split(found[1]) if not word.startswith((">", "2>"))]
            commands.append(" ".join(words))
    return commands


def test_the_readme_names_two_commands_and_how_to_stop_the_demo():
    assert readme_commands() == ["make demo", "make test"]
    assert "`make down`" in (REPO / "README.md").read_text()


def test_ci_runs_the_readmes_commands_and_make_down_only():
    commands = ci_commands(CI.read_text())
    assert set(commands) <= {*readme_commands(), "make down"}, commands
    assert [c for c in commands if c != "make down"] == readme_commands()  # the demo first, then the tests


def test_a_ci_step_the_readme_does_not_ask_for_is_caught():
    planted = CI.read_text().replace("timed make demo\n", "make images\ntimed make demo\n")
    assert "make images" in ci_commands(planted)
    assert not set(ci_commands(planted)) <= {*readme_commands(), "make down"}
