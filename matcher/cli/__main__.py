"""``python -m matcher.cli``: the ``pilotfish`` command."""

from .main import main

main()
