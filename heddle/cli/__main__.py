"""``python -m heddle.cli``: the ``heddle`` command."""

from heddle.cli import main

main()
