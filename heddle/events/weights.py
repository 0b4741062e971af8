"""Weight versions: ``heddle.evt.weights.<weight_version>.<kind>``.

A trainer publishes ``WeightsPublished`` when version ``v`` of the policy's weights can be loaded
(``HeddleClient.publish_weights``); the control plane sends every live worker a ``LoadWeights``
command (and each worker that registers later, until it holds the latest version); a worker loads
at a safe point (between generations: new ones wait, running ones finish) and records
``WeightsLoaded``, or ``WeightsLoadFailed`` with the reason. Every ``Generated`` carries the
version that produced it (``weight_version``), and ``Completed`` the versions of its generations.

Versions are integers that grow: 0 is the weights a worker started with (none published yet); a
published version not above the latest one is ignored by the control plane.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from heddle.events.base import Event

WeightVersion = Annotated[int, msgspec.Meta(ge=0)]
"""A weight version: 0 (the initial weights) or a published one, above it."""
WeightSourceKind = Literal["path", "object_store"]
LoadPolicy = Literal["between_steps"]


class WeightSource(msgspec.Struct, frozen=True, kw_only=True):
    """Where a version's weights are.

    - ``path``: a file or folder every worker can read at ``path`` (local on a one-host
      deployment, or on a shared file system): a ``torch.save`` state dict or a safetensors file
      for the torch engine, a Hugging Face checkpoint folder for SGLang;
    - ``object_store``: the NATS object store (small models): ``bucket`` / ``name`` hold the
      bytes of one state-dict file (``size`` bytes, SHA-256 ``sha256`` in hex), which the worker
      fetches into its data dir and loads as a path.
    """

    kind: WeightSourceKind = "path"
    path: str = ""
    bucket: str = ""
    name: str = ""
    size: int = 0
    sha256: str = ""
    load_format: str = ""
    """Passed to engines that take one (SGLang's ``load_format``); "" = the engine's default."""


class WeightsEvent(Event, frozen=True, kw_only=True):
    family: ClassVar[str] = "weights"
    weight_version: WeightVersion


class WeightsPublished(WeightsEvent, frozen=True, kw_only=True, tag="weights.published"):
    source: WeightSource
    load_policy: LoadPolicy = "between_steps"
    """When a worker swaps: ``between_steps`` (no generation runs across the swap)."""
    publisher: str = ""
    """Who published it (the trainer's name)."""


class WeightsLoaded(WeightsEvent, frozen=True, kw_only=True, tag="weights.loaded"):
    worker_id: str
    incarnation: str = ""
    load_s: float = 0.0
    """Wall seconds from the command's arrival to the engine serving the version (the wait for
    running generations included)."""


class WeightsLoadFailed(WeightsEvent, frozen=True, kw_only=True, tag="weights.load_failed"):
    worker_id: str
    reason: str
    incarnation: str = ""


WeightsEventT = WeightsPublished | WeightsLoaded | WeightsLoadFailed
WEIGHTS_EVENTS: tuple[type[WeightsEvent], ...] = (
    WeightsPublished,
    WeightsLoaded,
    WeightsLoadFailed,
)
