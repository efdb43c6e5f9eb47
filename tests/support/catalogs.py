"""Catalogs that several test files share."""

from __future__ import annotations

# Two sites of one 4-core queue each, told apart by Platform: the operator-view tests' catalog.
TWO_SITES = """
[sites.A]
Platform = "EL9"
[sites.A.ces.ce]
[sites.A.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
[sites.B]
Platform = "EL8"
[sites.B.ces.ce]
[sites.B.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""
QA, QB = "A/ce/q", "B/ce/q"


# -- the director tests' catalog -------------------------------------------------------------------------

#: Slurm's nice parameters of the test catalog (the seed's PriorityParams, set per queue here).
TIME_ORIGIN = "2024-01-01 00:00 +00:00"
NICE_FACTOR = 0.5
#: Grid Engine: one priority step per this many seconds of start-by ahead of now.
PRIO_SECONDS = 60.0

# One site per backend kind, one queue each, two shapes: c1 is the cheapest for one core, c2 the only
# one for two cores and cheaper than two c1 for two one-core jobs. n_max_queued = 1 per shape.
# Memory is 1 GB per core because Grid Engine enforces h_vmem as `ulimit -v` on the Python pilot.
CATALOG = """
[sites."Test.local".ces.host]
batch = "local"
[sites."Test.local".ces.host.batch_options]
repo_key = "pftest-"
grace = 1
[sites."Test.local".ces.host.queues.q]
n_max_queued = 1
max_running = 4
wall_granularity = 60
shapes = [
    { name = "c1", cpu = 1, mem = "1G", wall = "10m", cost = 1.0 },
    { name = "c2", cpu = 2, mem = "2G", wall = "10m", cost = 1.5 },
]

[sites."Test.slurm".ces.ctld]
batch = "slurm"
[sites."Test.slurm".ces.ctld.batch_options]
config = "@SLURM_CONF@"
partition = "debug"
repo_key = "pftest:"
use_nice = true
time_origin = "@TIME_ORIGIN@"
nice_factor = @NICE_FACTOR@
poll_interval = 0.5
[sites."Test.slurm".ces.ctld.queues.q]
n_max_queued = 1
max_running = 4
wall_granularity = 60
shapes = [
    { name = "c1", cpu = 1, mem = "1G", wall = "10m", cost = 1.0 },
    { name = "c2", cpu = 2, mem = "2G", wall = "10m", cost = 1.5 },
]

[sites."Test.sge".ces.qmaster]
batch = "sge"
[sites."Test.sge".ces.qmaster.batch_options]
root = "@SGE_ROOT@"
cell = "default"
hard = "-q all.q"
pe = "smp"
repo_key = "pftest:"
prio_seconds = @PRIO_SECONDS@
poll_interval = 0.5
accounting_grace = 5
[sites."Test.sge".ces.qmaster.queues.q]
n_max_queued = 1
max_running = 4
wall_granularity = 60
shapes = [
    { name = "c1", cpu = 1, mem = "1G", wall = "10m", cost = 1.0 },
    { name = "c2", cpu = 2, mem = "2G", wall = "10m", cost = 1.5 },
]
"""

SITES = {"local": "Test.local", "slurm": "Test.slurm", "sge": "Test.sge"}
QUEUES = {"local": "Test.local/host/q", "slurm": "Test.slurm/ctld/q", "sge": "Test.sge/qmaster/q"}


def catalog_text() -> str:
    return (
        CATALOG.replace("@SLURM_CONF@", "/var/tmp/pilotfish-slurm/slurm.conf")
        .replace("@SGE_ROOT@", "/var/lib/gridengine")
        .replace("@TIME_ORIGIN@", TIME_ORIGIN)
        .replace("@NICE_FACTOR@", str(NICE_FACTOR))
        .replace("@PRIO_SECONDS@", str(PRIO_SECONDS))
    )
