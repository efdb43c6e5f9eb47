"""The shared core of Pilotfish: requirements, the resource catalog, and the task-queue store in Redis.

Nothing in this package imports Celery: it is used alike by the matcher, the pilots and the directors.
"""

__version__ = "0.1.0"
