"""`heddle` commands: bench_tools (registered on the groups of heddle.cli.apps)."""
