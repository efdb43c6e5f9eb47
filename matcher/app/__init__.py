"""The Celery control plane: the app (:mod:`matcher.app.celery_app`) and beat's scheduler (:mod:`matcher.app.beat`).

Together with :mod:`matcher.cli`, this package is the only part of the control plane that imports ``pilot``
(the director task).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """``app`` for Celery's ``-A matcher.app`` (see :mod:`matcher.app.celery_app`)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import celery_app

    return celery_app.app
