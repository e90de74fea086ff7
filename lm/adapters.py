"""The adapters every predictor is called through: DSPy's ChatAdapter and JSONAdapter, plus two things.

1. **The shared-head prompt layout** (setting ``prompt_layout: shared_head``). Every call made for
   one question starts with the same bytes: the question, the evidence and the schema context.
   The role's instructions, its demos and its own inputs follow. The embedded engine keeps the KV
   cache of the longest prefix it has seen, so the generator, the repairer and the three judges
   pay for the (long) schema context once per question and round instead of once per call. In
   DSPy's own layout (``prompt_layout: dspy``) the role's instructions come first, which makes the
   prefix shared between calls of one role across questions, but never the schema.

   Role isolation is unchanged: each predictor keeps its own signature, instructions and demos,
   and may run on its own LM. Only where the shared inputs sit in the prompt moves: in the system
   message, before the role's instructions, rendered the same way whatever the signature says of
   them, so that the head is byte-identical across roles. The task message at the end repeats the
   short head fields (question, evidence) and points to the schema context at the start, so that
   the model answers this question and not a demo's. A signature without any of the head fields
   (the column describer) is formatted as DSPy does.

2. **Bounded JSON replies.** Where a reply is constrained by the signature's JSON schema (the
   embedded engine), DSPy's schema says only "integer" and "string": the 0.5B wrote E_data = 17,
   a reply the judge then retried. Every JSON adapter here adds each score field's scale as its
   minimum and maximum, a rationale's length limit, and a list's number of items and their length,
   so the engine's grammar cannot produce these faults. With ``judge_diagnosis_chars`` set, a judge's
   diagnosis (the generator's feedback) is bounded too. The chat prompt is unchanged.

3. **The compact JSON template** (setting ``prompt_template: compact``, JSON only). DSPy's
   JSONAdapter describes the outputs three times: a field list with descriptions, a JSON skeleton
   with a note per integer field, and an order reminder in the task message; it also shows the
   inputs' section layout, which the task message then uses. The prefix cache cannot reuse that
   text across questions or roles. The compact template keeps the field list (it carries each
   scale) and the order of the keys, and drops the skeleton, the input layout and the type
   notes: where the reply is constrained by the signature's JSON schema, the grammar enforces
   what they say. The instructions lose DSPy's eight-space indent. Each role's tail is 21-33%
   shorter (800-1,300 characters per judge on the shipped signatures). Parsing is DSPy's.

4. **Counting JSONAdapter fallbacks.** ChatAdapter retries a reply it cannot parse with JSONAdapter
   (one more LM call); each such fallback is reported to the open ``CostMeter``s, or turned off
   (setting ``json_adapter_fallback``). The fallback keeps the layout.
"""
from __future__ import annotations

import copy
import re
import textwrap
from typing import Any

import dspy

from reflect_sql.lm.accounting import note_adapter_fallback
from reflect_sql.signatures.scales import LIST_ITEMS, ONE_LINE, ONE_LINE_CHARS, SHORT_LIST, Scale

LAYOUTS = ("shared_head", "dspy")
# The fields every per-question signature takes, in the order they open the prompt: question and
# evidence hold for the whole question, the schema context for one retrieval round.
HEAD_FIELDS = ("question", "evidence", "schema_context")
# Left out of the task message; the short fields are written in both places.
LONG_HEAD_FIELDS = ("schema_context",)
HEAD_INTRO = ("This conversation is one step of answering a question over a SQL database. "
              "The question, its evidence and the database schema context come first; the task follows.")
HEAD_END = "(End of the shared context. Your role and task follow.)"
_HEAD_SECTION = re.compile(r"\[\[ ## (\w+) ## \]\]\n")


def render_head(values: dict[str, Any]) -> str:
    """The shared head for ``values`` (a subset of HEAD_FIELDS); depends on nothing else."""
    parts = [HEAD_INTRO]
    for name in HEAD_FIELDS:
        if name in values:
            value = values[name]
            parts.append(f"[[ ## {name} ## ]]\n{'' if value is None else str(value).strip()}")
    parts.append(HEAD_END)
    return "\n\n".join(parts)


def parse_head(system_text: str) -> dict[str, str]:
    """The head fields of a system message written in the shared-head layout ({} for any other)."""
    if not system_text.startswith(HEAD_INTRO) or HEAD_END not in system_text:
        return {}
    head = system_text[len(HEAD_INTRO):system_text.index(HEAD_END)]
    parts = _HEAD_SECTION.split(head)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


class SharedHeadLayout:
    """Mixin over a ChatAdapter (or subclass) that moves the head fields to the top of the prompt."""

    def format(self, signature, demos, inputs):
        head = {name: inputs[name] for name in HEAD_FIELDS if name in signature.input_fields and name in inputs}
        messages = super().format(signature, demos, inputs)
        if not head:
            return messages
        # The task message restates the short head fields: with compiled demos before it, each
        # carrying its own question, a 1.5B given only "see the start" answered the last demo's
        # question on all three demo questions. Only the long schema context is left in the head.
        rest = {k: v for k, v in inputs.items() if k not in LONG_HEAD_FIELDS}
        long_names = ", ".join(f"`{n}`" for n in head if n in LONG_HEAD_FIELDS)
        note = f"({long_names} of this question is given at the start of this conversation.)" if long_names else ""
        messages[0] = {**messages[0], "content": render_head(head) + "\n\n" + messages[0]["content"]}
        messages[-1] = {**messages[-1], "content": self.format_user_message_content(
            signature, rest, prefix=note, main_request=True)}
        return messages


def bounds(signature, diagnosis_chars: int | None = None) -> dict[str, dict[str, int]]:
    """The JSON-schema bounds of ``signature``'s output fields: a score's scale, a rationale's length,
    a list's items and their length, and, when ``diagnosis_chars`` is set, a judge's diagnosis."""
    out = {}
    for name, field in signature.output_fields.items():
        desc = (field.json_schema_extra or {}).get("desc", "")
        if name == "diagnosis" and field.annotation is str and diagnosis_chars:
            out[name] = {"maxLength": diagnosis_chars}
        elif field.annotation is int and (scale := Scale.described_in(desc)) is not None:
            out[name] = {"minimum": scale.low, "maximum": scale.high}
        elif field.annotation is str and desc.startswith(ONE_LINE):
            out[name] = {"maxLength": ONE_LINE_CHARS}
        elif field.annotation == list[str] and desc.startswith(SHORT_LIST):
            out[name] = {"maxItems": LIST_ITEMS, "items": {"type": "string", "maxLength": ONE_LINE_CHARS}}
    return out


class BoundedJSON:
    """Mixin over a JSONAdapter: the structured-output schema carries ``bounds`` (see module docstring)."""

    diagnosis_chars: int | None = None  # setting judge_diagnosis_chars

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        super()._prepare_response_format(lm, lm_kwargs, signature)
        model = lm_kwargs.get("response_format")
        limits = bounds(signature, self.diagnosis_chars)
        if not limits or not (isinstance(model, type) and hasattr(model, "model_json_schema")):
            return  # no schema (plain JSON mode, or an LM without structured outputs): nothing to bound
        schema = copy.deepcopy(model.model_json_schema())  # DSPy's own dict stays as DSPy built it
        properties = schema.get("properties", {})
        for name, limit in limits.items():
            if name in properties:
                properties[name] = {**properties[name], **limit}
        # DSPy builds a fresh model per call and reads its schema through this method (as DSPy's own
        # adapter does to make the schema strict), so the patch reaches the request and the cache key.
        model.model_json_schema = lambda *args, **kwargs: schema


class BoundedJSONAdapter(BoundedJSON, dspy.JSONAdapter):
    pass


class SharedHeadJSONAdapter(SharedHeadLayout, BoundedJSONAdapter):
    pass


class CompactTemplate:
    """Mixin over a JSONAdapter: the compact template (see module docstring)."""

    def format_field_structure(self, signature) -> str:
        return ("Each input comes in its own `[[ ## name ## ]]` section. "
                "Reply with one JSON object whose keys are the output fields, in their order.")

    def format_task_description(self, signature) -> str:
        return "Your task:\n" + textwrap.dedent(signature.instructions).strip()

    def user_message_output_requirements(self, signature) -> str:
        return "Respond with the JSON object: " + ", ".join(f"`{name}`" for name in signature.output_fields) + "."


class CompactJSONAdapter(CompactTemplate, BoundedJSONAdapter):
    pass


class SharedHeadCompactJSONAdapter(CompactTemplate, SharedHeadJSONAdapter):
    pass


class CountingChatAdapter(dspy.ChatAdapter):
    """ChatAdapter that reports each JSONAdapter fallback to the open cost meters."""

    def _make_json_adapter_fallback(self):
        note_adapter_fallback()
        return BoundedJSONAdapter(use_native_function_calling=self.use_native_function_calling,
                                  parallel_tool_calls=self.parallel_tool_calls)


class SharedHeadChatAdapter(SharedHeadLayout, CountingChatAdapter):
    def _make_json_adapter_fallback(self):
        note_adapter_fallback()
        return SharedHeadJSONAdapter(use_native_function_calling=self.use_native_function_calling,
                                     parallel_tool_calls=self.parallel_tool_calls)


def make_adapter(settings) -> dspy.ChatAdapter:
    """The adapter for ``settings``: its format, its prompt layout and its JSON fallback policy."""
    shared = settings.prompt_layout == "shared_head"
    if settings.adapter == "json":
        return _json_adapter(shared, compact=settings.prompt_template == "compact",
                             diagnosis_chars=settings.judge_diagnosis_chars)
    cls = SharedHeadChatAdapter if shared else CountingChatAdapter
    return cls(use_json_adapter_fallback=settings.json_adapter_fallback)


def _json_adapter(shared: bool, compact: bool = False, diagnosis_chars: int | None = None) -> dspy.JSONAdapter:
    """The one place a JSON adapter is built: its layout, its template and its diagnosis bound."""
    if compact:
        adapter = SharedHeadCompactJSONAdapter() if shared else CompactJSONAdapter()
    else:
        adapter = SharedHeadJSONAdapter() if shared else BoundedJSONAdapter()
    adapter.diagnosis_chars = diagnosis_chars
    return adapter


def other_adapter(adapter: Any) -> dspy.Adapter:
    """The adapter a reply is retried through when it is not usable (a judge contradicting itself):
    JSON for a chat adapter and chat for JSON, in the same layout, so the retry is another prompt."""
    shared = isinstance(adapter, SharedHeadLayout)
    if isinstance(adapter, dspy.JSONAdapter):
        return (SharedHeadChatAdapter if shared else CountingChatAdapter)(use_json_adapter_fallback=False)
    return _json_adapter(shared)
