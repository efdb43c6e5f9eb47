"""The command line: the error boundary (:mod:`matcher.cli.main`) and the commands it registers.

``pilotfish`` is :func:`main`; ``python -m matcher.cli`` runs it too. Together with :mod:`matcher.app`, this
package is the only part of the control plane that imports ``pilot`` (the pilot, director and MJF commands).
"""

from .main import main

__all__ = ["main"]
