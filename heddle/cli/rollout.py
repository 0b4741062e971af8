"""`heddle` commands: rollout (registered on the groups of heddle.cli.apps)."""
