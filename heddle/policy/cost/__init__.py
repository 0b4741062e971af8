"""What one worker costs: the model every system in a comparison shares (docs/calibration.md).

- ``model``: the analytic GPU cost model (decode step, prefill, KV capacity) and its calibrated
  presets.
- ``profiles``: a user's measured inter-token latencies as a cost model.
"""
