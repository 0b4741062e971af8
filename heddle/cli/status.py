"""`heddle` commands: status (registered on the groups of heddle.cli.apps)."""
