"""What-if: re-simulate a recorded rollout's step lengths under other policies.

    recording = await load_recording(bus, replayed_ledger, rollout_id)
    report = resimulate(recording, ["verl", "heddle"])
    report.to_json()     # recorded makespan, simulated makespans, ratios
    report = await what_if(bus, replayed_ledger, rollout_id, ["verl"])   # both steps

``heddle replay ROLLOUT --what-if POLICY`` is the command-line face of it.

Modules: ``recording`` (``load_recording``, ``what_if``: a recorded rollout's trace, workers and
predictor), ``resimulate`` (``resimulate``: its step lengths under other policies), ``cluster`` (the
simulated cluster standing for the recorded one).
"""

from heddle.whatif.cluster import RecordedCluster, recognise_hardware, recorded_cluster
from heddle.whatif.recording import load_recording, what_if
from heddle.whatif.resimulate import (
    Recording,
    WhatIfOptions,
    WhatIfReport,
    choose_predictor,
    resimulate,
)

__all__ = [
    "RecordedCluster",
    "Recording",
    "WhatIfOptions",
    "WhatIfReport",
    "choose_predictor",
    "load_recording",
    "recognise_hardware",
    "recorded_cluster",
    "resimulate",
    "what_if",
]
