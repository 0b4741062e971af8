"""Experiments on the simulator: sweeps, studies, the workload hunter, the regression corpus and
their reports. The simulator (``heddle.sim``) simulates one system on one trace; everything here
decides what to simulate, how often, and what to make of the makespans, and the simulator never
imports it.

Its own package rather than a part of ``heddle.bench``: a benchmark here runs nothing but the
simulator (no bus, no ledger, no engine, no deployment), and ``heddle.bench`` measures a running
deployment and sits above the processes; ``heddle.bench.reshard`` builds on the sweep's cells.
The commands keep their names: ``heddle sim sweep``, ``heddle sim hunt``, ``heddle sim compare
--reference`` / ``--async-steps`` (``heddle.cli``).

Modules: ``cells`` (a sweep's cell, its splits and draw-seed namespaces), ``sweep`` (``heddle sim
sweep``: every system over the workload zoo) with ``sweep_pool`` (running cells in worker
processes), ``sweep_summary`` (ratios per cell and their summary), ``sweep_report`` (markdown
report and figure), ``sweep_plans`` (``--plans``: every TP plan per cell), ``sweep_gain`` (one
predictor's gain over another, family by family), ``sweep_context`` (the context model per cell,
``--predictor context``), ``kv_pressure`` (a cell's KV oversubscription, and a cluster scaled to
reach one) and ``reference`` (the best-known reference, reported apart from the systems);
``plan_validation`` (the plan estimate against simulated makespans); ``hunt`` (``heddle sim
hunt``: a search for the cells where heddle loses most) with ``hunt_space`` (its points: a
workload, a seed, a cluster), ``hunt_report`` (its JSON and table) and ``hunt_corpus`` (its worst
cells into the corpus); ``corpus`` (the regression corpus the sweep runs beside the zoo);
``study`` (every system under every predictor, as markdown tables); ``async_steps`` (the training
loop: stop-the-world against partial rollout).
"""
