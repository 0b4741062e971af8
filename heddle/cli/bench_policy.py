"""`heddle` commands: bench_policy (registered on the groups of heddle.cli.apps)."""
