"""`heddle` commands: worker (registered on the groups of heddle.cli.apps)."""
