"""`heddle` commands: bench_fidelity (registered on the groups of heddle.cli.apps)."""
