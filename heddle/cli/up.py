"""`heddle` commands: up (registered on the groups of heddle.cli.apps)."""
