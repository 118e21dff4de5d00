"""Write the API reference (docs/reference/*.md) from the CRDs this package generates.

The reference is read off the CRD's OpenAPI schema, the one thing the API server enforces,
so it says what the server accepts: every field of spec and status with its type,
default, enum, bounds and description, and each CEL rule's message on the object it
sits on. ``make api-reference`` writes the pages; a unit test regenerates them and fails
when the committed ones differ.

    python -m reward_operator.api.reference docs/reference
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .crd import all_crds

Schema = dict[str, Any]


def reference_pages() -> dict[str, str]:
    """Page file name (``rewardmodel.md``, ...) -> its Markdown, one page per CRD."""
    pages = {}
    for file_name, crd in all_crds().items():
        kind = crd["spec"]["names"]["kind"]
        pages[f"{kind.lower()}.md"] = crd_reference(crd, source=f"crds/{file_name}")
    return pages


def crd_reference(crd: dict[str, Any], source: str) -> str:
    names = crd["spec"]["names"]
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    lines = [
        f"# {names['kind']}",
        "",
        f"<!-- Generated from {source} by `make api-reference`. Do not edit. -->",
        "",
        f"`{crd['spec']['group']}/{version['name']}`, {crd['spec']['scope'].lower()}; "
        f"plural `{names['plural']}`, short names {_code_list(names.get('shortNames', []))}, "
        f"categories {_code_list(names.get('categories', []))}.",
        "",
        _text(schema.get("description", "")),
        "",
        "Each field's facts come from the CRD's OpenAPI schema, which the API server enforces:",
        "a spec that breaks a bound or a rule is refused with the rule's message.",
        "",
        "## Columns",
        "",
        f"`kubectl get {names['plural']}` prints the columns without a priority; `-o wide` adds the others.",
        "",
        "| column | type | shown | value | description |",
        "|---|---|---|---|---|",
    ]
    for column in version.get("additionalPrinterColumns", []):
        shown = "always" if not column.get("priority") else "`-o wide`"
        lines.append(
            f"| {column['name'].upper()} | {column['type']} | {shown} | `{_cell(column['jsonPath'])}` "
            f"| {_cell(column.get('description', ''))} |"
        )
    for top in ("spec", "status"):
        node = schema["properties"].get(top)
        if node is None:
            continue
        lines += ["", f"## {top}", ""]
        lines += _object_intro(node, top)
        for path, field, required in _fields(node, top):
            lines += ["", f"### {path}", "", *_field(field, required)]
    # Sections end in a blank line of their own; the next heading adds one more.
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"


def _fields(node: Schema, path: str) -> Iterator[tuple[str, Schema, bool]]:
    """Every field below ``node``, depth first, in the schema's order: (path, schema, required)."""
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}"
        yield child_path, child, name in node.get("required", [])
        yield from _fields(child, child_path)
        items = child.get("items")
        if items and items.get("properties"):
            yield from _fields(items, f"{child_path}[]")
        values = child.get("additionalProperties")
        if isinstance(values, dict) and values.get("properties"):
            yield from _fields(values, f"{child_path}.*")


def _object_intro(node: Schema, path: str) -> list[str]:
    lines = []
    if node.get("description"):
        lines += [_text(node["description"]), ""]
    lines += _rules(node, path)
    return lines


def _field(field: Schema, required: bool) -> list[str]:
    facts = [f"**{_type(field)}**"]
    if required:
        facts.append("required")
    if "default" in field:
        facts.append(f"default `{_value(field['default'])}`")
    if "enum" in field:
        facts.append("one of " + ", ".join(f"`{_value(v)}`" for v in field["enum"]))
    facts += _bounds(field)
    items = field.get("items")
    if items and not items.get("properties"):
        item_facts = _bounds(items)
        if "enum" in items:
            item_facts.insert(0, "one of " + ", ".join(f"`{_value(v)}`" for v in items["enum"]))
        if item_facts:
            facts.append("each item: " + ", ".join(item_facts))
    values = field.get("additionalProperties")
    if isinstance(values, dict) and not values.get("properties") and _bounds(values):
        facts.append("each value: " + ", ".join(_bounds(values)))
    lines = [" · ".join(facts), ""]
    if field.get("description"):
        lines += [_paragraph(field["description"]), ""]
    lines += _rules(field, "")
    if items:
        lines += _rules(items, "each item")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _rules(node: Schema, scope: str) -> list[str]:
    rules = node.get("x-kubernetes-validations", [])
    if not rules:
        return []
    heading = f"Rules on {scope}:" if scope else "Rules:"
    lines = [heading, ""]
    for rule in rules:
        words = rule.get("message") or rule.get("messageExpression") or rule["rule"]
        lines.append(f"- {_text(words)}")
    return [*lines, ""]


def _type(field: Schema) -> str:
    if field.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = field.get("type", "any")
    if field.get("format"):
        kind = f"{kind} ({field['format']})"
    if kind == "array":
        items = field.get("items", {})
        item_type = "object" if items.get("properties") else _type(items)
        list_type = field.get("x-kubernetes-list-type")
        keys = field.get("x-kubernetes-list-map-keys")
        suffix = f", a map keyed by {_code_list(keys)}" if list_type == "map" and keys else ""
        suffix = ", a set" if list_type == "set" else suffix
        return f"array of {item_type}{suffix}"
    values = field.get("additionalProperties")
    if kind == "object" and isinstance(values, dict):
        return f"map of string to {'object' if values.get('properties') else _type(values)}"
    return kind


def _bounds(field: Schema) -> list[str]:
    bounds = [
        bound
        for low, high, unit in (
            ("minimum", "maximum", ""),
            ("minLength", "maxLength", "characters"),
            ("minItems", "maxItems", "items"),
            ("minProperties", "maxProperties", "entries"),
        )
        if (bound := _range(field.get(low), field.get(high), unit))
    ]
    if field.get("exclusiveMinimum"):
        bounds.append("minimum excluded")
    if field.get("exclusiveMaximum"):
        bounds.append("maximum excluded")
    if "pattern" in field:
        bounds.append(f"pattern `{field['pattern']}`")
    return bounds


def _range(low: Any, high: Any, unit: str) -> str:
    unit = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{low} to {high}{unit}"
    if low is not None:
        return f"at least {low}{unit}"
    if high is not None:
        return f"at most {high}{unit}"
    return ""


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _code_list(values: list[str]) -> str:
    return ", ".join(f"`{v}`" for v in values) or "none"


def _text(text: str) -> str:
    """One paragraph of schema prose as Markdown: '<' would open an HTML tag, '*' an emphasis."""
    return " ".join(text.split()).replace("<", "&lt;").replace("*", "\\*")


# Where a wrapped line would begin a Markdown block (a list item, a heading, a quote, a heading's underline), it
# stays on the line before
_BLOCK_START = re.compile(r"^([-+*>#]|\d+[.)])(\s|$)|^[-=]+\s*$")


def _paragraph(text: str, width: int = 110) -> str:
    """:func:`_text` wrapped at ``width``: a long description reads as lines in the page's source too."""
    wrapped: list[str] = []
    for line in textwrap.wrap(_text(text), width=width, break_long_words=False, break_on_hyphens=False):
        if wrapped and _BLOCK_START.match(line):
            wrapped[-1] += " " + line
        else:
            wrapped.append(line)
    return "\n".join(wrapped)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in reference_pages().items():
        path = folder / name
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference")):
        print(f"wrote {path}")
