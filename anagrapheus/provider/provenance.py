"""A recording's provenance as pydantic-ai knows it: its version, and the models and providers its responses report.

The timeline stamps what it knows of the process (`own_provenance`); this adds what only the provider layer can read
from the pins: which results are model responses, and the names they carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.ordered import read_ordered
from anagrapheus.timeline.provenance import Provenance, Stamping, installed_version, own_provenance

__all__ = [
    "DEFAULT_CALL_POLICY",
    "PYDANTIC_AI_DISTRIBUTION",
    "STAMPING",
    "VERIFIED_PYDANTIC_AI",
    "current_provenance",
    "pinned_responses",
    "provenance_of_pins",
]

DEFAULT_CALL_POLICY: tuple[str, int] = ("semantic", 1)
"""The name and version of the default call policy, `SemanticCallPolicy`, which declares itself with them.

Stated here, where no pydantic-ai is imported, so the timeline reads it (in `STAMPING`) without loading it.
"""

PYDANTIC_AI_DISTRIBUTION = "pydantic-ai-slim"
"""The distribution whose version a recording's `pydantic_ai` field holds."""

VERIFIED_PYDANTIC_AI: tuple[str, str] = ("2.68.0", "2.78.0")
"""The pydantic-ai releases, first and last, that CI replays every committed recording under (`.ci/constraints/`).

A recording made under one release of this range replays under any other: the key scheme keys what a release adds
only off its default (docs/explanation/pinning-and-replay.md). Loading one across the range warns of nothing.
"""


def pinned_responses(results: Iterable[JSONValue]) -> Iterable[Mapping[str, JSONValue]]:
    """The model responses among pinned results (each a pin's `raw`, as written), in order."""
    for raw in results:
        result = read_ordered(raw)
        if isinstance(result, dict) and result.get("kind") == "response":
            yield result


def current_provenance(
    responses: Iterable[Mapping[str, JSONValue]], *, call_policy: object | None = None
) -> Provenance:
    """Stamp what this process is, with the model and provider names that the pinned `responses` report."""
    models: set[str] = set()
    providers: set[str] = set()
    for response in responses:
        model, provider = response.get("model_name"), response.get("provider_name")
        if isinstance(model, str):
            models.add(model)
        if isinstance(provider, str):
            providers.add(provider)
    return own_provenance(call_policy=call_policy).model_copy(
        update={
            "pydantic_ai": installed_version(PYDANTIC_AI_DISTRIBUTION),
            "models": tuple(sorted(models)),
            "providers": tuple(sorted(providers)),
        }
    )


def provenance_of_pins(results: Iterable[JSONValue], /, *, call_policy: object | None) -> Provenance:
    """The provider's stamp of a recording: this process, with what the pinned results' responses report."""
    return current_provenance(pinned_responses(results), call_policy=call_policy)


STAMPED_FIELDS = ("conversation_id", "model_id", "run_id")
"""The fields pydantic-ai sets on a `ModelResponse` after its model call returned: a run's history holds them, the
model call's pin may not (fixed by recording format version 4: a history's reference to a pin is read with them)."""

STAMPING = Stamping(
    provenance_of_pins,
    default_call_policy=DEFAULT_CALL_POLICY,
    verified={"pydantic_ai": VERIFIED_PYDANTIC_AI},
    stamped_fields=STAMPED_FIELDS,
)
"""How recordings are stamped and checked under pydantic-ai: the stamp, the default policy, the verified releases.

The recording functions of the timeline use it when given no stamping (`anagrapheus.timeline.provenance
.default_stamping`); the layers above pass it where they write and read recordings."""
