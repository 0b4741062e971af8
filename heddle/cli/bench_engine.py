"""`heddle` commands: bench_engine (registered on the groups of heddle.cli.apps)."""
