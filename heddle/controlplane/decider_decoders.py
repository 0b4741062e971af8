"""The deciders' event decoders: the bulky token lists the deciders only count are not parsed.

A step's ``Generated`` carries its output ids and logprobs (thousands of numbers), its
``GenerationStarted`` the input it adds (an observation), a ``Completed`` the whole trajectory's, a
``TrajectorySubmitted`` its prompt's; every decider receives them, and parsing those lists costs
several times what deciding does (a 1000-token ``Generated``: ~80 us parsed, ~15 us skipped). The
deciders read only their lengths (``len(output_token_ids)``) or nothing at all, so these decoders
(``heddle.events.lean``, ``Restore.LISTS``) skip the lists as raw JSON and hand the deciders real
events whose counted id lists are zeros of the right length (logprobs and a ``Completed``'s lists
left empty, and a ``GenerationStarted``'s input, which no decider reads). Every other list is
decoded whole.

Where ids end up in a command, the event goes through whole: the placement decider's
``ToolReturned`` (a ``ContinueTrajectory`` carries it to the worker) and ``TrajectorySubmitted``
(its spec goes to the worker in ``StartTrajectory``): ``decoder_for("placement")``. A decider
that one day reads ids of a counted event must declare it here; ``tests/controlplane`` checks that
every decider decides the same on these decoders and on ``heddle.events.decode_event``.

An array kept in the object store (a prompt over the event size limit,
``heddle.bus.payloads``) is not read back: counted, it counts its ``n``; whole, it stays a
placeholder (``heddle.events.arrays.placeholder``) that deciders count with ``num_items`` and
that a command re-encodes as the same reference, which the worker resolves. Deciders count
lists with ``heddle.events.arrays.num_items``, never ``len``.

A whole spec's prompt ids are decoded as a tuple (``ListNeed.TUPLE``): the router keeps every
live trajectory's spec, and a tuple of numbers is dropped from the cycle collector's lists after
the first collection it survives, while a list stays in them. Measured on ``heddle bench
control`` at 6400 live coding trajectories (~3,500 prompt ids each, 22M list items), every full
collection of the control plane paused it for 270-780 ms with lists; with tuples 5 ms. A tuple
encodes as the same JSON array, so the commands on the wire are byte for byte the same.
"""

from __future__ import annotations

from heddle.events import Completed, Generated, GenerationStarted, ToolReturned, TrajectorySpec
from heddle.events.lean import EventDecoder, ListNeed, ListNeeds, Restore, lean_event_decoder

DECIDERS_NEEDS: ListNeeds = {
    GenerationStarted: {"input_token_ids": ListNeed.NOTHING},
    Generated: {"output_token_ids": ListNeed.COUNT, "output_logprobs": ListNeed.NOTHING},
    ToolReturned: {"output_token_ids": ListNeed.COUNT},
    Completed: {
        "prompt_token_ids": ListNeed.NOTHING,
        "response_token_ids": ListNeed.NOTHING,
        "response_logprobs": ListNeed.NOTHING,
        "loss_mask": ListNeed.NOTHING,
        "logprob_mask": ListNeed.NOTHING,
    },
    TrajectorySpec: {"prompt_token_ids": ListNeed.COUNT},
}
"""What the deciders read of each list: its length (COUNT) or nothing; unnamed lists whole."""
PLACEMENT_NEEDS: ListNeeds = {
    **DECIDERS_NEEDS,
    ToolReturned: {},
    TrajectorySpec: {"prompt_token_ids": ListNeed.TUPLE},
}
"""What placement passes on to workers it gets whole (see the module docstring)."""

decode_for_deciders = lean_event_decoder(DECIDERS_NEEDS, restore=Restore.LISTS)
"""Counts or drops the deciders' token lists (the slots whose outputs embed no event)."""
decode_for_placement = lean_event_decoder(PLACEMENT_NEEDS, restore=Restore.LISTS)
"""Keeps what ``StartTrajectory`` and ``ContinueTrajectory`` pass on to workers."""


def decoder_for(*slots: str) -> EventDecoder:
    """The decoder of a consumer hosting ``slots`` (a router's stage is named after its deciders,
    ``placement+...``): whole where one of them passes ids on."""
    names = {name for slot in slots for name in slot.split("+")}
    return decode_for_placement if "placement" in names else decode_for_deciders
