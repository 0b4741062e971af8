"""`heddle` commands: sim (registered on the groups of heddle.cli.apps)."""
