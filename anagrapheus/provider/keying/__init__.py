"""Key material: one walk for every key, and the kept history behind the default call policy.

Every key (a model request, a tool call, an output function's call, an entity id, a custom policy's material)
is the walk of `material` (`MaterialWalk`), written once by `pin_key`'s code (`keys.key_of`); its fingerprint
is digested from that same walked material when first read. `canonical_value` accepts a subset of what the
walk accepts and writes every value both accept alike, so a value has one key whichever way it is keyed.

`SemanticCallPolicy` keys a request through `request.RequestKeys` in one pass: the kept history
(`history.KeyedHistory`) decides whether the conversation is kept, checks the messages it holds, and has one walk
(`material.walk_messages`) read what is new or changed; the rest of the request is walked after them
(`material.walk_rest`) unless it reads as the last request's did (`rest.KeptRest`, by each value's class and value).

The watch invariant: a kept message is reused only while every object its walk read is the same object, holding
by identity every value the walk read of it (one getter per object, read again on every request); anything else
is walked again, so a kept key is always byte-identical to the key walked from scratch.
"""
