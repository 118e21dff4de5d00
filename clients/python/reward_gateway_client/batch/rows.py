"""The input rows: where each part of an item is in a row (``Fields``), and each row as an item or a problem.

A row the gateway could not take (no prompt and response, no messages, a field of the wrong type) is never
sent: the gateway refuses a request whole when one of its items is malformed, so it would cost its whole group.
It becomes a failed row of its own, reason ``invalid``, with what is wrong; the rest goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

INVALID = "invalid"


@dataclass(frozen=True)
class Fields:
    """The input's field names (a RewardBatch's ``spec.input.fields``): an item is ``messages`` (a conversation
    ending with the response), ``prompt`` with ``response``, or ``text`` (finished text, scored as given; with a
    ``prompt`` it starts with, for a judge). ``id`` names the row in the output (its position
    where absent); rows with one ``group`` are the completions of one prompt, scored in one call and compared
    by a best-of-N selection; ``reference`` is what a judge compares a response with."""

    id: str = "id"
    prompt: str = "prompt"
    response: str = "response"
    messages: str = "messages"
    text: str = "text"
    group: str = "group"
    reference: str = "reference"


@dataclass(frozen=True)
class Row:
    """One input row: its position (0-based, counting every line with content), its id and group, and the
    item sent for it, or why there is none."""

    position: int
    id: Any
    group: str
    item: dict[str, Any] | None
    problem: str | None = None


def read_rows(lines: Iterable[str], fields: Fields) -> Iterator[Row]:
    """The rows of a JSONL input's lines (``store.Input.lines``), in order; a line that is not a JSON object is a
    row with its problem."""
    position = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        yield row_of(position, number, line, fields)
        position += 1


def row_of(position: int, line_number: int, line: str, fields: Fields) -> Row:
    try:
        record = json.loads(line)
    except ValueError as error:
        return Row(position, None, f"#{position}", None, f"line {line_number} is not JSON: {error}")
    if not isinstance(record, dict):
        return Row(position, None, f"#{position}", None, f"line {line_number} is not a JSON object")
    row_id = record.get(fields.id, position)
    group = record.get(fields.group)
    key = str(group) if isinstance(group, str | int) and not isinstance(group, bool) else f"#{position}"
    item, problem = item_of(record, fields)
    return Row(position, row_id, key, item, problem)


def item_of(record: dict[str, Any], fields: Fields) -> tuple[dict[str, Any] | None, str | None]:
    """The ``/v1/rewards`` item of a row, or why the row has none."""
    reference = record.get(fields.reference)
    if reference is not None and not isinstance(reference, str):
        return None, f"{fields.reference} is not a string"
    messages = record.get(fields.messages)
    if messages is not None:
        problem = _messages_problem(messages, fields.messages)
        if problem is not None:
            return None, problem
        item: dict[str, Any] = {"messages": messages}
    elif fields.text in record:
        text, prompt = record[fields.text], record.get(fields.prompt)
        if not isinstance(text, str) or (prompt is not None and not isinstance(prompt, str)):
            return None, f"{fields.text} (and {fields.prompt}, where given) must be strings"
        item = {"text": text} if prompt is None else {"text": text, "prompt": prompt}
    else:
        prompt, response = record.get(fields.prompt), record.get(fields.response)
        if not isinstance(prompt, str) or not isinstance(response, str):
            return (
                None,
                f"a row needs {fields.messages}, {fields.text}, or {fields.prompt} and {fields.response} as strings",
            )
        item = {"prompt": prompt, "response": response}
    if reference is not None:
        item["reference"] = reference
    return item, None


def _messages_problem(messages: Any, name: str) -> str | None:
    if not isinstance(messages, list) or not messages:
        return f"{name} is not a non-empty list"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"{name}[{index}] is not a message with a role"
        if not isinstance(message.get("content"), str):
            return f"{name}[{index}] has no text content"
    return None
