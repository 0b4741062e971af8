"""Heddle's verl plugin: verl imports it in every process that imports verl (the
``verl.plugins`` entry point in pyproject.toml; ``VERL_USE_EXTERNAL_MODULES`` does the same by
hand). It registers ``rollout.name=heddle`` (``heddle.integrations.verl_rollout``)."""

from heddle.integrations.verl_rollout import register

register()
