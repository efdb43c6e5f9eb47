"""The resource catalog: Sites -> Computing Elements -> Queues, with their parameters and pilot shapes.

RFC #7's resources description: every level may carry arbitrary parameters (valid for every
community), and per-community (VO) parameters; a queue inherits from its CE and site. Jobs'
free-form requirements are matched against a queue's *effective* parameters, and its consumables
against the queue's pilot *shapes*. The site director reads the same file to know where and how to
start pilots (batch system, its options, how many may wait or run).

TOML layout
-----------
::

    [sites."LCG.CERN.ch"]            # site parameters: apply to all its CEs and queues
    Platform = "EL9"
    SoftwareTag = ["AppVersion1"]
    [sites."LCG.CERN.ch".vo.lhcb]    # parameters for one community only
    MaxMemory = 4000
    [sites."LCG.CERN.ch".ces.ce1]
    batch = "slurm"                  # local | slurm | sge
    [sites."LCG.CERN.ch".ces.ce1.batch_options]   # handed to the backend as they are
    partition = "debug"
    [sites."LCG.CERN.ch".ces.ce1.queues.long]
    MaxCPUTime = 86400
    n_max_queued = 10                # pilots waiting per shape (open-lmake n_max_queued_jobs)
    max_running = 100                # cap on running + waiting pilots of this queue
    wall_granularity = 600           # pilot wall requests are rounded up to this
    pilot_lifetime = "36h"           # a new pilot asks for at least this wall (capped by its shape's)
    [[sites."LCG.CERN.ch".ces.ce1.queues.long.shapes]]
    name = "c4m16"
    cpu = 4
    mem = "16G"                      # sizes and durations as taskqueues.units reads them
    tmp = "50G"
    wall = "24h"
    cost = 0.20                      # per pilot-hour, any currency used consistently

(Names with dots must be quoted in TOML headers. TOML has no ``;`` separator: one key per line,
or an inline table ``shapes = [{ name = "c1m2", cpu = 1, mem = "2G" }]``.)

Keys of a site, CE or queue table
    ``ces`` (site) / ``queues`` (CE)  the next level down; every site needs a CE, every CE a queue.
    ``vo.<name>``                     per-VO section: parameters, ``batch_options``, ``n_max_queued``,
                                      ``max_running``, ``wall_granularity``, ``pilot_lifetime``.
    ``batch``                         ``local`` (default), ``slurm`` or ``sge``.
    ``batch_options``                 a table passed to the backend (partition, qos, repo_key,
                                      use_nice, root, cell, ...); merged key by key down the levels.
    ``shapes``                        array of tables: ``name``, ``cpu``, ``mem`` required; ``tmp``
                                      (default 0), ``wall`` (default 24 h), ``cost`` (default 1.0).
                                      A queue takes the nearest level's list (not merged).
    ``n_max_queued``                  default 10; ``max_running`` default unlimited;
    ``wall_granularity``              seconds or a duration, default 60.
    ``pilot_lifetime``                seconds or a duration: the wall a new pilot asks for at least,
                                      capped by its shape's wall, so it takes jobs of its shape for
                                      most of its life; default none (the wall its planned jobs need
                                      plus one granularity step).
    anything else                     a parameter: number, string or list of strings, validated
                                      like a requirement value (``Max*``/``Min*`` need numbers).

Inheritance: every value is looked up, from most to least specific, in queue/VO, queue, CE/VO, CE,
site/VO, site; the first level that sets it wins ("more specific wins", and a VO section beats the
all-VO values of its own level). ``batch_options`` and the parameters merge key by key that way.
Each queue's effective parameters also hold ``Site``, ``CE`` and ``Queue`` (its names); those three,
the consumables ``cpu``/``mem``/``tmp``/``wall`` and ``BannedSite`` cannot be set as parameters.
Names (sites, CEs, queues, shapes, VOs) are letters, digits and ``. _ + -``: they appear in queue
ids ``Site/CE/Queue``, batch job names and Redis keys.

Modules: ``reader`` (TOML text to validated ``levels``, naming file, line and key through
``positions``), ``inheritance`` (a queue as one VO sees it), ``queue`` (a queue and why it cannot run
a job), ``catalog`` (the queries: queues, eligibility, explanations) and ``local`` (the catalog of
``pilotfish run`` when none is given).
"""

from .catalog import DEFAULT_VO, Catalog, UnknownQueue
from .queue import BATCH_SYSTEMS, Queue

__all__ = ["BATCH_SYSTEMS", "DEFAULT_VO", "Catalog", "Queue", "UnknownQueue"]
