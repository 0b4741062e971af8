"""The ledger's event decoder: token lists are counted, never built.

The ledger stores counts of token ids, not the ids (the stream keeps those), and building
Python lists of hundreds of ints and floats costs more than everything else the projector does
with a step event. So every number list of every event, nested ones included, is skipped and
left as its raw JSON text (``heddle.events.lean``, ``Restore.RAW``), which
``heddle.events.arrays.num_items`` counts: a raw plain JSON list by its items, a raw compact
array by its ``n`` (its data not decoded). Events are instances of views of their classes, so
``isinstance`` checks and ``match`` statements hold.

Validation is the contract's, except for the types of the list elements.
"""

from __future__ import annotations

from heddle.events.lean import ListNeed, Restore, lean_event_decoder

decode_event_lean = lean_event_decoder({}, restore=Restore.RAW, others=ListNeed.COUNT)
"""Like ``heddle.events.decode_event``, with number lists left as ``msgspec.Raw`` (each
checked to be a list or a compact array, not any JSON value)."""
