"""An image checked by running its own commands in it (``Image.checks``: each a command as a user)."""

from __future__ import annotations

import shlex

from .buildah import run_commands_in_image
from .catalogue import BY_NAME
from .steps import note


def check_image(name: str) -> None:
    """Run the image's own checks (commands as its user); raises on the first failure."""
    checks = BY_NAME[name].checks
    for (user, argv), result in zip(checks, run_commands_in_image(name, checks), strict=True):
        if result.returncode != 0:
            raise RuntimeError(f"{name}: `{shlex.join(argv)}` as {user} failed: {result.stdout}{result.stderr}")
        said = result.stdout.strip().splitlines()[-1:] or [""]
        note(f"  {name}: `{shlex.join(argv)}` as {user}: ok {said[0][:80]}")
