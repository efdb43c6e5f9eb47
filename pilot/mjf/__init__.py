"""Machine/Job Features on the pilot side (HEPiX spec): read, derive, publish $JOBSTATUS, equip payloads.

* :mod:`~pilot.mjf.features` - the keys, their units, and the merged :class:`Features` view;
* :mod:`~pilot.mjf.source` - reading directories and URLs (HTTP caching) and merging with fallbacks;
* :mod:`~pilot.mjf.derive` - what Slurm, Grid Engine and the host tell when the site gives nothing;
* :mod:`~pilot.mjf.formulas` - the spec's formulas and the time-left arithmetic;
* :mod:`~pilot.mjf.jobstatus` - $JOBSTATUS values, writer and reader under the ``used_CPU`` lock;
* :mod:`~pilot.mjf.payload` - each payload's own $JOBFEATURES, $TMPDIR and environment;
* :mod:`~pilot.mjf.command` - the ``pilotfish mjf`` command.
"""

from pilot.mjf.features import Features, JobFeatures, MachineFeatures
from pilot.mjf.jobstatus import JobStatus, JobStatusWriter, RunningPayload, read_jobstatus
from pilot.mjf.payload import PayloadArea, PayloadSandbox
from pilot.mjf.source import FeatureReader, read_features

__all__ = [
    "FeatureReader",
    "Features",
    "JobFeatures",
    "JobStatus",
    "JobStatusWriter",
    "MachineFeatures",
    "PayloadArea",
    "PayloadSandbox",
    "RunningPayload",
    "read_features",
    "read_jobstatus",
]
