"""Drawing: PNGs of simulated and stream-recorded rollouts hold the lanes' colours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from heddle.bus import Bus
from heddle.config import Settings
from heddle.timeline import (
    SegmentKind,
    Timeline,
    build_timeline,
    draw_timeline,
    read_rollout_events,
    write_rollout_timeline,
)
from heddle.timeline.draw import COLOURS

from .test_segments import simulated


def has_colour(image: np.ndarray, kind: SegmentKind) -> bool:
    rgb = np.array(to_rgb(COLOURS[kind]))
    return bool((np.abs(image[..., :3] - rgb).max(axis=-1) < 0.02).any())


def test_draws_every_kind_of_segment(tmp_path: Path) -> None:
    _, timeline = simulated("heddle", num=96)
    path = draw_timeline(timeline, tmp_path / "plots" / "timeline.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 1000
    for kind in SegmentKind:
        assert has_colour(image, kind), kind


def test_nothing_to_draw_is_a_clear_error(tmp_path: Path) -> None:
    empty = Timeline("r1", "heddle", 1.0, [], 0.0)
    with pytest.raises(ValueError, match="no recorded steps"):
        draw_timeline(empty, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


async def test_timeline_of_a_rollout_recorded_in_the_stream(nats_url: str, tmp_path: Path) -> None:
    run, expected = simulated("verl")
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as bus:
        await bus.publish_many(run.events)
        events = await read_rollout_events(bus, "sim")
        assert build_timeline(events) == expected
        path = await write_rollout_timeline(bus, "sim", tmp_path / "sim.png")
        assert has_colour(imread(path), SegmentKind.DECODE)
        with pytest.raises(ValueError, match="no events of rollout 'other'"):
            await read_rollout_events(bus, "other")
