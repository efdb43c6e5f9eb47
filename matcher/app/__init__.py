"""The Celery control plane: the app (:mod:`matcher.app.celery_app`) and beat's scheduler (:mod:`matcher.app.beat`).

Together with :mod:`matcher.cli`, this package is the only part of the control plane that imports ``pilot``
(the director task).
"""
