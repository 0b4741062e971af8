"""`heddle` commands: tools (registered on the groups of heddle.cli.apps)."""
