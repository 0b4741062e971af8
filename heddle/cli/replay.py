"""`heddle` commands: replay (registered on the groups of heddle.cli.apps)."""
