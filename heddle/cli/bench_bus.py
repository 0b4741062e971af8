"""`heddle` commands: bench_bus (registered on the groups of heddle.cli.apps)."""
