"""Prometheus metrics of the control plane and the rollout workers.

Every long-lived Heddle process takes ``--metrics-port`` (0, the default, serves nothing) and
serves its registry on ``http://<host>:<port>/metrics``::

    metrics = Metrics()                                   # one registry per process
    server = start_metrics_server(port, metrics.registry) # None when port == 0
    ...
    server.close()

Workers: wrap the agent's message sink in ``MetricsSink`` (gauges from every telemetry report,
counters and step-time histograms from every published event; ``heddle worker --metrics-port``).
The control plane (``heddle up --metrics-port``): each decider consumer reports its batches to
``Metrics.batch_observer`` (outputs, wall time; the prediction slot also its inputs, for the
prediction error), and a ``ConsumerLagTracker`` polls its durables. Metric names and labels are
listed in ``heddle.observability.metrics``. ``heddle status`` reads consumer lag from a running
NATS here (``probe``); what it shows is ``heddle.controlplane.snapshot``.

Modules: ``metrics`` (the metric families, ``Metrics``), ``server`` (the ``GET /metrics`` HTTP
server), ``sink`` (``MetricsSink``), ``lag`` (``ConsumerLagTracker``: consumer lag from stream and
durable positions), ``predictions`` (how wrong the remaining-length predictions turned out),
``probe`` (consumer lag read by ``heddle status``).
"""

from heddle.observability.lag import ConsumerLagTracker, ConsumerRef
from heddle.observability.metrics import Metrics
from heddle.observability.predictions import PredictionTracker
from heddle.observability.server import MetricsServer, start_metrics_server
from heddle.observability.sink import MetricsSink

__all__ = [
    "ConsumerLagTracker",
    "ConsumerRef",
    "Metrics",
    "MetricsServer",
    "MetricsSink",
    "PredictionTracker",
    "start_metrics_server",
]
