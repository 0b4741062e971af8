"""`heddle bench integrations` converts its in-memory batch both ways and reports both; the
slime samples it times carry the trajectories' statuses and masks."""

from __future__ import annotations

from heddle.cli.bench_integrations import _SlimeSample, integration_figures, synthetic_completions
from heddle.integrations.batch import BatchResult
from heddle.integrations.slime import fill_groups


def test_the_bench_reports_both_conversions() -> None:
    report = integration_figures(16, 8, 200, 1)
    assert report["rows"] == 16 and report["response_tokens"] == 2 * 50 + 3 * 33
    assert report["slime_samples"]["median_s"] >= 0
    assert "median_s" in report["verl_data_proto"] or "skipped" in report["verl_data_proto"]


def test_the_bench_batch_becomes_slime_samples_with_statuses() -> None:
    batch = synthetic_completions(64, 4, 2, 3, 2)
    groups = fill_groups([[_SlimeSample() for _ in range(8)] for _ in range(8)],
                         BatchResult("b", batch, {}))  # fmt: skip
    samples = [s for g in groups for s in g]
    assert samples[0].loss_mask == [1, 1, 1, 0, 0, 1, 1, 1]
    assert samples[15].status == _SlimeSample.Status.TRUNCATED
    assert samples[63].status == _SlimeSample.Status.ABORTED and set(samples[63].loss_mask) == {0}
