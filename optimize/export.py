"""What a compiled program actually says to the model: per predictor, its instructions, its few-shot
demos and the fully rendered prompt messages for an example input (through DSPy's ChatAdapter).

The output is meant to be committed and diffed between compilations: keys in a fixed order,
predictors sorted by name, no timestamps or library versions.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

import dspy

# A small, fixed example for every input field our signatures have, so that exports of two
# programs render the same input and differ only where the programs differ.
EXAMPLE_INPUTS: dict[str, str] = {
    "question": "What share of the orders placed in 2023 included at least one dessert?",
    "evidence": "share = orders with a dessert / all orders; dessert refers to category = 'dessert'",
    "dialect": "sqlite",
    "schema_context": (
        "CREATE TABLE orders (\n  id INTEGER PRIMARY KEY,\n  placed_at TEXT  -- e.g. '2023-05-01'\n);\n\n"
        "CREATE TABLE order_items (\n  order_id INTEGER,\n  dish_id INTEGER,\n"
        "  FOREIGN KEY (order_id) REFERENCES orders(id),\n  FOREIGN KEY (dish_id) REFERENCES dishes(id)\n);\n\n"
        "CREATE TABLE dishes (\n  id INTEGER PRIMARY KEY,\n  name TEXT,\n  category TEXT  -- e.g. 'dessert', 'main'\n);"
    ),
    "examples": "",
    "feedback": "",
    "diagnosis": "",
    "sql": (
        "SELECT COUNT(DISTINCT oi.order_id) / COUNT(DISTINCT o.id) FROM orders AS o "
        "LEFT JOIN order_items AS oi ON oi.order_id = o.id "
        "LEFT JOIN dishes AS d ON d.id = oi.dish_id AND d.category = 'dessert' "
        "WHERE o.placed_at LIKE '2023%'"
    ),
    "error": "no such column: o.placed",
    "result_preview": "1 row; columns: share\nshare\n0",
    "check_findings": "- [error] integer_division: `COUNT(DISTINCT oi.order_id) / COUNT(DISTINCT o.id)` divides two integers",
}


def plain(value: Any) -> Any:
    """Demo values (pydantic models, tuples, Literal ints) as JSON-ready data."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "model_dump"):
        return plain(value.model_dump())
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    return str(value)


def _demo_dict(demo: Any) -> dict[str, Any]:
    data = demo.toDict() if hasattr(demo, "toDict") else dict(demo)
    return {k: plain(v) for k, v in data.items() if not k.startswith("dspy_")}


def example_inputs(signature: type[dspy.Signature], overrides: Mapping[str, Any] | None = None,
                   predictor_name: str | None = None) -> dict[str, Any]:
    """Inputs for rendering: ``overrides`` (flat ``{field: value}``, or ``{predictor: {field: value}}``)
    over ``EXAMPLE_INPUTS``; a field known to neither shows as ``<field>``."""
    overrides = dict(overrides or {})
    specific = overrides.get(predictor_name) if predictor_name else None
    if isinstance(specific, Mapping):
        overrides = {**{k: v for k, v in overrides.items() if not isinstance(v, Mapping)}, **specific}
    out = {}
    for name in signature.input_fields:
        if name in overrides and not isinstance(overrides[name], Mapping):
            out[name] = overrides[name]
        else:
            out[name] = EXAMPLE_INPUTS.get(name, f"<{name}>")
    return out


def describe(program: dspy.Module, example: Mapping[str, Any] | None = None) -> dict[str, Any]:
    adapter = dspy.ChatAdapter()
    predictors = {}
    for name, predictor in sorted(program.named_predictors(), key=lambda item: item[0]):
        signature = predictor.signature
        demos = [_demo_dict(d) for d in predictor.demos]
        inputs = example_inputs(signature, example, name)
        messages = adapter.format(signature, [dict(d) for d in predictor.demos], inputs)
        predictors[name] = {
            "signature": signature.__name__,
            "instructions": signature.instructions,
            "input_fields": list(signature.input_fields),
            "output_fields": list(signature.output_fields),
            "demos": demos,
            "example_input": inputs,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        }
    return {"program": type(program).__name__, "predictors": predictors}


def to_json(description: Mapping[str, Any]) -> str:
    return json.dumps(description, indent=2, ensure_ascii=False) + "\n"


def _fence(text: str, info: str = "text") -> str:
    # A fence longer than any backtick run inside, so prompts that contain ``` stay intact.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def to_markdown(description: Mapping[str, Any]) -> str:
    lines = [f"# Prompts of `{description['program']}`", ""]
    for name, p in description["predictors"].items():
        lines += [f"## Predictor `{name}` ({p['signature']})", "",
                  f"Inputs: {', '.join(p['input_fields'])}. Outputs: {', '.join(p['output_fields'])}.", "",
                  "### Instructions", "", _fence(p["instructions"]), "",
                  f"### Demos ({len(p['demos'])})", ""]
        if not p["demos"]:
            lines += ["None.", ""]
        for i, demo in enumerate(p["demos"], 1):
            lines += [f"#### Demo {i}", "", _fence(json.dumps(demo, indent=2, ensure_ascii=False), "json"), ""]
        lines += ["### Rendered messages for the example input", ""]
        for i, message in enumerate(p["messages"], 1):
            lines += [f"#### {i}. {message['role']}", "", _fence(message["content"]), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def render(description: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return to_json(description)
    if fmt == "md":
        return to_markdown(description)
    raise ValueError(f"unknown export format {fmt!r} (expected md or json)")
