"""`heddle` commands: db (registered on the groups of heddle.cli.apps)."""
