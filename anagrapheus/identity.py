"""Entity ids as draws: a fresh UUIDv7 pinned through a resolver, so a replay re-establishes the same id."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from anagrapheus.errors import PinResultError
from anagrapheus.provider.keying.keys import key_of, walked
from anagrapheus.timeline.canonical import JSONValue
from anagrapheus.timeline.events import new_uuid7
from anagrapheus.timeline.resolving.resolver import Resolver, as_resolver

__all__ = ["ENTITY_ID_KIND", "mint_entity_id"]

ENTITY_ID_KIND = "entity_id"
"""The pin kind of a minted entity id."""


def _entity_id(raw: JSONValue) -> str:
    # A pin that is not a UUID string would hand out a wrong id with confidence; refuse it instead.
    if not isinstance(raw, str):
        raise PinResultError(f"an {ENTITY_ID_KIND} pin holds {type(raw).__name__}, not a UUID string")
    try:
        parsed = uuid.UUID(raw)
    except ValueError:
        raise PinResultError(f"an {ENTITY_ID_KIND} pin holds {raw!r}, not a UUID") from None
    return str(parsed)


def mint_entity_id(material: object, *, resolver: Resolver | None = None, new_id: Callable[[], str] = new_uuid7) -> str:
    """Return a fresh UUIDv7 for the entity `material` describes, drawn through `resolver` when given one.

    `material` is what makes the entity this entity (a kind and a human-readable name, say), as
    JSON-shaped values (or what a tool's arguments may hold: sets, enums, pydantic models), walked as every
    key's material is: two mints with equal material in one unit of work get one id, and a
    replay of the unit gets the id the recorded run got. Without a resolver the id is unpinned.
    `new_id` is the source of fresh ids, injectable so that a re-recording can be byte-identical.
    """
    normalised = walked(material)  # refused alike with or without a resolver
    if resolver is None:
        return new_id()
    key, fingerprint = key_of(ENTITY_ID_KIND, normalised)
    return as_resolver(resolver).resolve(
        key, kind=ENTITY_ID_KIND, effect=new_id, interpret=_entity_id, fingerprint=fingerprint
    )
