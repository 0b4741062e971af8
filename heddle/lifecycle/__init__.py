"""A training run's data lifecycle: archive finished rollouts to Parquet
(``archive``, schemas in ``archive_schema``), purge archived ones from the stream and the object
store behind a verified ledger snapshot (``purge``), and retention, which decides what to archive
and purge (``retention``). docs/trainer.md, "Archiving and purging"."""
