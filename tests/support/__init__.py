"""What the tests share (this package holds no test), one module per concept.

- ``paths``: where the repository is (``ROOT``).
- ``polling``: :func:`~tests.support.polling.wait_until`, the one way a test waits for something.
- ``clock``: :class:`~tests.support.clock.FakeClock`, the settable clock the store, submitter and MJF accept.
- ``keyspace``: snapshots, dumps and restores of a whole keyspace (real or fake server).
- ``store``: jobs with hand-made task queues, a populated store, one real call of every script, the checks.
- ``catalogs``: the catalogs several test files share.
- ``pilots``: MJF directories, pilot subprocesses, payload timelines.
- ``backends``: the contract every pilot backend keeps, and the environment of a real batch system.
- ``directors``: a rig of director, store and batch system for the director's integration tests.
- ``flower``: a real Flower, Celery events as Flower sees them, pilot and job records for them.
- ``scripts``: ``scripts/*.py`` imported as the modules they are when they run.
- ``schedules``: the exact optimum of tiny scheduling instances.
- ``documents``: hostile workflow documents for the submission fuzz tests.

The fixtures (servers, ``clock``, ``store``, ``flower``) are in ``tests/conftest.py``.
"""
