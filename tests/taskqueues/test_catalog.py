"""The resource catalog: TOML layout, inheritance, per-VO sections, line-numbered errors, eligibility."""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import psutil
import pytest

from taskqueues.catalog import Catalog, Queue, UnknownQueue
from taskqueues.errors import ConfigError, NoEligibleQueue, RequirementError
from taskqueues.requirements import parse_requirements
from taskqueues.shapes import Shape
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "catalog.toml"

SHAPE = '[[sites.S.ces.C.queues.Q.shapes]]\nname = "c1"\ncpu = 1\nmem = "2G"\n'


def toml(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def marked_line(text: str) -> int:
    """The 1-based line carrying the ``# <-`` marker: where the error must point."""
    lines = [number for number, line in enumerate(text.splitlines(), start=1) if "# <-" in line]
    assert len(lines) == 1, "exactly one marker per test text"
    return lines[0]


def error_of(text: str, source: str = "cat.toml") -> str:
    with pytest.raises(ConfigError) as caught:
        Catalog.loads(text, source=source)
    return str(caught.value)


# --------------------------------------------------------------------------------- the example


def test_example_catalog_loads_with_every_batch_system() -> None:
    catalog = Catalog.load(EXAMPLE)
    queues = catalog.queues()
    assert [q.id for q in queues] == [
        "LCG.CERN.ch/ce503.cern.ch/long",
        "LCG.CERN.ch/ce503.cern.ch/short",
        "LCG.CERN.ch/gpu01.cern.ch/gpu",
        "LCG.RAL.uk/arc-ce01.gridpp.rl.ac.uk/all.q",
        "LCG.RAL.uk/arc-ce01.gridpp.rl.ac.uk/long.q",
        "local/localhost/local",
    ]
    assert {q.batch for q in queues} == {"local", "slurm", "sge"}
    assert catalog.vos() == {"lhcb", "atlas"}
    long = catalog.queue("LCG.CERN.ch/ce503.cern.ch/long")
    assert long.shapes[1] == Shape(name="c4m16", cpu=4, mem=16000, tmp=50000, wall=172800, cost=0.20)
    assert long.wall_granularity == 600 and long.n_max_queued == 10 and long.max_running == 100
    short = catalog.queue("LCG.CERN.ch/ce503.cern.ch/short")
    assert dict(short.batch_options) == {
        "config": "/var/tmp/pilotfish-slurm/slurm.conf",
        "partition": "debug",
        "repo_key": "pf:",
        "use_nice": True,
        "nice_factor": 2.0,
    }
    # Per-VO: LHCb sees more memory and its own tag at CERN; ATLAS has a lower cap on the long queue.
    assert catalog.queue(long.id, "lhcb").params["MaxMemory"] == 4000 and long.params["MaxMemory"] == 2000
    assert "LHCbDIRAC-v11" in catalog.queue(long.id, "lhcb").params["SoftwareTag"]  # type: ignore[operator]
    assert catalog.queue(long.id, "atlas").max_running == 40
    # More specific wins: the RAL long queue is EL9 on an EL8 site.
    assert catalog.queue("LCG.RAL.uk/arc-ce01.gridpp.rl.ac.uk/long.q").params["Platform"] == "EL9"
    assert catalog.queue("LCG.RAL.uk/arc-ce01.gridpp.rl.ac.uk/all.q").params["Platform"] == "EL8"


def test_example_matches_a_mixed_batch() -> None:
    catalog = Catalog.load(EXAMPLE)
    tagged = parse_requirements({"SoftwareTag": "LHCbDIRAC-v11", "cpu": 2, "mem": "4G"}, job="t")
    assert catalog.eligible_queues(tagged) == []
    assert [q.id for q in catalog.eligible_queues(tagged, "lhcb")] == [
        "LCG.CERN.ch/ce503.cern.ch/long",
        "LCG.CERN.ch/ce503.cern.ch/short",
        "LCG.CERN.ch/gpu01.cern.ch/gpu",
        "LCG.RAL.uk/arc-ce01.gridpp.rl.ac.uk/all.q",
        "LCG.RAL.uk/arc-ce01.gridpp.rl.ac.uk/long.q",
    ]
    gpu = parse_requirements({"Tag": "GPU", "cpu": 8, "mem": "16G", "GPUModel": ["A100", "H100"]}, job="g")
    assert [q.id for q in catalog.eligible_queues(gpu)] == ["LCG.CERN.ch/gpu01.cern.ch/gpu"]
    anywhere = parse_requirements({"cpu": 1, "mem": "1G", "BannedSite": ["LCG.CERN.ch", "LCG.RAL.uk"]}, job="a")
    assert [q.id for q in catalog.eligible_queues(anywhere)] == ["local/localhost/local"]


# ------------------------------------------------------------------------------- inheritance


INHERIT = toml(
    """
    [sites.S]
    Platform = "EL8"
    Country = "ch"
    Tier = 1
    batch = "slurm"
    n_max_queued = 3
    [sites.S.batch_options]
    partition = "site-part"
    repo_key = "s:"
    [sites.S.vo.lhcb]
    Tier = 0
    Platform = "EL7"
    wall_granularity = "15m"
    [sites.S.vo.lhcb.batch_options]
    qos = "lhcb"
    [[sites.S.shapes]]
    name = "site-shape"
    cpu = 1
    mem = "1G"

    [sites.S.ces.C]
    Platform = "EL9"
    [sites.S.ces.C.batch_options]
    partition = "ce-part"
    [sites.S.ces.C.vo.lhcb]
    Country = "fr"

    [sites.S.ces.C.queues.Q]
    Country = "de"
    max_running = 5
    [sites.S.ces.C.queues.Q.vo.atlas]
    max_running = 2
    Extra = ["x", "y"]

    [sites.S.ces.C.queues.R]
    batch = "sge"
    [[sites.S.ces.C.queues.R.shapes]]
    name = "big"
    cpu = 16
    mem = "64G"
    [[sites.S.ces.C.queues.R.shapes]]
    name = "small"
    cpu = 2
    mem = "4G"
    """
)


def test_queue_inherits_from_ce_and_site_and_more_specific_wins() -> None:
    q = Catalog.loads(INHERIT).queue("S/C/Q")
    assert dict(q.params) == {
        "Site": "S",
        "CE": "C",
        "Queue": "Q",
        "Platform": "EL9",
        "Country": "de",
        "Tier": 1,
    }
    assert q.batch == "slurm" and q.n_max_queued == 3 and q.max_running == 5 and q.wall_granularity == 60
    assert dict(q.batch_options) == {"partition": "ce-part", "repo_key": "s:"}
    assert q.shapes == (Shape(name="site-shape", cpu=1, mem=1000),)  # inherited from the site


def test_vo_section_beats_its_level_but_not_a_more_specific_level() -> None:
    catalog = Catalog.loads(INHERIT)
    q = catalog.queue("S/C/Q", vo="lhcb")
    assert q.params["Tier"] == 0  # site/lhcb beats site
    assert q.params["Platform"] == "EL9"  # CE beats site/lhcb
    assert q.params["Country"] == "de"  # queue beats CE/lhcb
    assert q.wall_granularity == 900
    assert dict(q.batch_options) == {"partition": "ce-part", "repo_key": "s:", "qos": "lhcb"}
    r = catalog.queue("S/C/R", vo="lhcb")
    assert r.params["Country"] == "fr"  # CE/lhcb beats CE and site
    atlas = catalog.queue("S/C/Q", vo="atlas")
    assert atlas.max_running == 2 and atlas.params["Extra"] == ("x", "y")
    assert "Extra" not in catalog.queue("S/C/Q").params
    assert catalog.queue("S/C/Q", vo="cms") == catalog.queue("S/C/Q")  # a VO with no section sees the all-VO view


def test_shapes_are_taken_from_the_nearest_level_not_merged() -> None:
    r = Catalog.loads(INHERIT).queue("S/C/R")
    assert [s.name for s in r.shapes] == ["big", "small"]
    assert r.batch == "sge"
    assert r.shapes[0] == Shape(name="big", cpu=16, mem=64000, tmp=0, wall=86400, cost=1.0)


def test_defaults() -> None:
    q = Catalog.loads("[sites.S.ces.C.queues.Q]\n" + SHAPE).queue("S/C/Q")
    assert (q.batch, q.n_max_queued, q.max_running, q.wall_granularity) == ("local", 10, None, 60)
    assert dict(q.batch_options) == {} and dict(q.params) == {"Site": "S", "CE": "C", "Queue": "Q"}
    assert (q.site, q.ce, q.name) == ("S", "C", "Q")


def test_queues_are_immutable_and_hashable() -> None:
    q = Catalog.loads(INHERIT).queue("S/C/Q")
    with pytest.raises(TypeError):
        q.params["Platform"] = "x"  # type: ignore[index]
    assert len({q, Catalog.loads(INHERIT).queue("S/C/Q")}) == 1


def test_inline_shapes_and_quoted_names() -> None:
    text = toml(
        """
        [sites."LCG.CERN.ch".ces."ce-1.cern.ch".queues."all.q"]
        shapes = [
            { name = "a", cpu = 1, mem = 1000, tmp = "1G", wall = "1:00:00", cost = 0 },
            { name = "b", cpu = 2, mem = "2Gi", wall = 7200, cost = 0.5 },
        ]
        """
    )
    q = Catalog.loads(text).queues()[0]
    assert q.id == "LCG.CERN.ch/ce-1.cern.ch/all.q"
    assert q.shapes == (
        Shape(name="a", cpu=1, mem=1000, tmp=1000, wall=3600, cost=0.0),
        Shape(name="b", cpu=2, mem=2148, tmp=0, wall=7200, cost=0.5),
    )


# ------------------------------------------------------------------------ line-numbered errors


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            """
            [sites.S.ces.C]
            batch = "condor"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.ces.C.batch: unknown batch system 'condor'; use one of local, slurm, sge",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "ok"
            cpu = 1
            mem = "1G"
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "bad"
            cpu = 1
            mem = "4Q"  # <-
            """,
            "sites.S.ces.C.queues.Q.shapes[1].mem: unknown size unit 'Q'",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            shapes = [
                { name = "a", cpu = 1, mem = "1G" },
                { name = "b", cpu = 0, mem = "1G" },  # <-
            ]
            """,
            "shapes[1].cpu: cpu must be a whole number of cores in 1..4096, got 0",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "x"
            cpu = 1
            mem = "1G"
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "x"  # <-
            cpu = 2
            mem = "2G"
            """,
            "shapes[1].name: duplicate shape name 'x' (also shapes[0])",
        ),
        (
            """
            [sites.S]
            Platform = "EL9"
            [sites.S.ces.C]
            [sites.S.ces.C.queues.Q]  # <-
            Tag = "x"
            """,
            "sites.S.ces.C.queues.Q: the queue has no pilot shapes",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            n_max_queued = "ten"  # <-
            """
            + SHAPE,
            "n_max_queued: must be a whole number, got 'ten'",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            max_running = 0  # <-
            """
            + SHAPE,
            "max_running: must be at least 1, got 0",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            n_max_queued = true  # <-
            """
            + SHAPE,
            "must be a whole number, got True",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            wall_granularity = "soon"  # <-
            """
            + SHAPE,
            "wall_granularity: cannot read 'soon' as a duration",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            batch_options = "partition=debug"  # <-
            """
            + SHAPE,
            "batch_options: batch_options must be a table, got str",
        ),
        (
            """
            [sites.S]
            SoftwareTag = ["a", 3]  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.SoftwareTag: list values must be strings, got 3",
        ),
        (
            """
            [sites.S]
            MaxMemory = "4G"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.MaxMemory: MaxMemory is compared with >= or <= and needs a number",
        ),
        (
            """
            [sites.S]
            Enabled = true  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.Enabled: a boolean (True) is not a requirement value",
        ),
        (
            """
            [sites.S.ces.C]
            mem = "16G"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "'mem' is a consumable: give it in the queue's shapes",
        ),
        (
            """
            [sites.S.ces.C]
            Site = "other"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "'Site' is set from the table names",
        ),
        (
            """
            [sites.S]
            BannedSite = "X"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "BannedSite is a job requirement",
        ),
        (
            """
            [sites.S]
            [sites.S.ce.C]  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.ce: unknown table",
        ),
        (
            """
            [sites.S.vo.lhcb]
            batch = "sge"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.vo.lhcb.batch: 'batch' cannot differ per VO",
        ),
        (
            """
            [sites.S]
            vo = "lhcb"  # <-
            [sites.S.ces.C.queues.Q]
            """
            + SHAPE,
            "sites.S.vo: vo must be a table, got str",
        ),
        (
            """
            [sites.S.ces.C]
            queues = 3  # <-
            """,
            "sites.S.ces.C.queues: queues must be a table, got int",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            ces = {}  # <-
            """
            + SHAPE,
            "'ces' is not allowed here",
        ),
        (
            """
            [sites.S]  # <-
            Platform = "EL9"
            """,
            "sites.S: this site has no CE; add a [sites.S.ces.NAME] table",
        ),
        (
            """
            [sites.S.ces.C]  # <-
            batch = "slurm"
            """,
            "sites.S.ces.C: this ce has no queue; add a [sites.S.ces.C.queues.NAME] table",
        ),
        (
            """
            [sites."bad/name".ces.C.queues.Q]  # <-
            """
            + SHAPE.replace("sites.S", 'sites."bad/name"'),
            "site name 'bad/name' must be 1-128 letters",
        ),
        (
            """
            [sites.S.ces."c e".queues.Q]  # <-
            """,
            "ce name 'c e' must be 1-128 letters",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "c1"
            cpu = 1
            mem = "1G"
            memory = "2G"  # <-
            """,
            "shapes[0].memory: unknown shape key 'memory'",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            [[sites.S.ces.C.queues.Q.shapes]]  # <-
            name = "c1"
            cpu = 1
            """,
            "shapes[0]: a shape needs 'mem'",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "c1"
            cpu = 1
            mem = "1G"
            cost = -0.5  # <-
            """,
            "shapes[0].cost: cost must be a finite number >= 0, got -0.5",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            [[sites.S.ces.C.queues.Q.shapes]]
            name = "c1"
            cpu = 1
            mem = "1G"
            wall = "2y"  # <-
            """,
            "shapes[0].wall: unknown duration unit 'y'",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            shapes = []  # <-
            """,
            "shapes must be a non-empty array of tables",
        ),
        (
            """
            [sites.S.ces.C.queues.Q]
            shapes = ["c1"]  # <-
            """,
            "shapes[0]: a shape must be a table, got 'c1'",
        ),
        (
            """
            title = "my grid"  # <-
            """,
            "title: unknown top-level key",
        ),
    ],
)
def test_errors_name_file_line_and_key(text: str, fragment: str) -> None:
    text = toml(text)
    message = error_of(text)
    assert message.startswith(f"cat.toml:{marked_line(text)}: "), message
    assert fragment in message, message


def test_empty_catalog() -> None:
    assert error_of("# nothing\n") == "cat.toml: the catalog defines no site; add a [sites.NAME] table"


def test_toml_syntax_errors_keep_line_and_column() -> None:
    message = error_of('[sites.S]\nPlatform = "EL9"\nTag = [1, \n\n[x\n')
    assert message.startswith("cat.toml:5:"), message
    assert "TOML syntax error" in message
    assert error_of('[sites.S]\nname = "c1"; cpu = 4\n').startswith("cat.toml:2:12: TOML syntax error")


def test_positions_survive_multiline_strings_arrays_comments_and_dotted_keys() -> None:
    text = toml(
        '''
        # [sites.S.ces.C.queues.Q] in a comment is no header
        [sites.S]
        Note = """
        [sites.S.ces.C]
        batch = "fake"
        """
        Other = \'\'\'more "text" ]
        lines\'\'\'
        SoftwareTag = [
            "a",  # a comment ] with a bracket
            "b",
        ]
        ces.C.Platform = "EL9"
        "quoted.key" = "v"
        [sites.S.ces.C.queues.Q]
        shapes = [{ name = "a", cpu = 1, mem = "1G" },
                  # { name = "b", cpu = 1, tmp = "lots" } in a comment
                  { name = "b", cpu = 1, mem = "1G", tmp = "lots" }]  # <-
        '''
    )
    message = error_of(text)
    assert message.startswith(f"cat.toml:{marked_line(text)}: sites.S.ces.C.queues.Q.shapes[1].tmp:"), message


def test_dotted_key_parameter_error_points_at_its_line() -> None:
    text = toml(
        """
        [sites.S]
        Country = "ch"
        ces.C.queues.Q.Tag = [1]  # <-
        [[sites.S.ces.C.queues.Q.shapes]]
        name = "c1"
        cpu = 1
        mem = "1G"
        """
    )
    assert error_of(text).startswith(f"cat.toml:{marked_line(text)}: sites.S.ces.C.queues.Q.Tag:")


def test_quoted_names_are_shown_quoted() -> None:
    text = toml(
        """
        [sites."LCG.CERN.ch".ces.C.queues.Q]
        batch = "pbs"  # <-
        """
        + SHAPE.replace("sites.S", 'sites."LCG.CERN.ch"')
    )
    message = error_of(text)
    assert message.startswith(f'cat.toml:{marked_line(text)}: sites."LCG.CERN.ch".ces.C.queues.Q.batch:'), message


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text('[sites.S.ces.C.queues.Q]\nbatch = "pbs"\n' + SHAPE)
    with pytest.raises(ConfigError, match=rf"^{path}:2: sites.S.ces.C.queues.Q.batch: unknown batch system"):
        Catalog.load(path)
    with pytest.raises(ConfigError, match="cannot read the catalog"):
        Catalog.load(tmp_path / "missing.toml")
    path.write_bytes(b"\xff\xfe[sites]")
    with pytest.raises(ConfigError, match="not UTF-8"):
        Catalog.load(path)


# -------------------------------------------------------------------------------- the queries


def test_unknown_queue_suggests_a_close_one() -> None:
    catalog = Catalog.loads(INHERIT, source="grid.toml")
    with pytest.raises(UnknownQueue, match=r"grid.toml: no queue 'S/C/QQ'; did you mean 'S/C/Q'\?"):
        catalog.queue("S/C/QQ")
    with pytest.raises(ConfigError, match="known: S/C/Q, S/C/R"):
        catalog.queue("nothing-like-it")


def test_offered_names_and_check_names() -> None:
    catalog = Catalog.loads(INHERIT)
    assert catalog.offered_names() == {"Site", "CE", "Queue", "Platform", "Country", "Tier"}
    assert "Extra" in catalog.offered_names("atlas")
    fine = parse_requirements({"Platform": "EL9", "BannedSite": "X", "cpu": 2, "mem": "1G", "wall": "1h"})
    catalog.check_names(fine, job="j")
    with pytest.raises(RequirementError) as caught:
        catalog.check_names(parse_requirements({"Platfrom": "EL9", "Zzz": "1"}), job="j9")
    assert caught.value.job == "j9" and caught.value.field == "Platfrom"
    assert "offers 'Platfrom' (did you mean 'Platform'?), 'Zzz' to VO 'default'" in str(caught.value)
    with pytest.raises(RequirementError, match="'Extra'"):
        catalog.check_names(parse_requirements({"Extra": "x"}), job="j")
    catalog.check_names(parse_requirements({"Extra": "x"}), job="j", vo="atlas")


def test_eligible_queues_checks_free_form_and_consumables() -> None:
    catalog = Catalog.loads(INHERIT)
    assert [q.id for q in catalog.eligible_queues(parse_requirements({"Platform": "EL9"}))] == [
        "S/C/Q",
        "S/C/R",
    ]
    assert [q.id for q in catalog.eligible_queues(parse_requirements({"cpu": 2}))] == ["S/C/R"]
    assert [q.id for q in catalog.eligible_queues(parse_requirements({"cpu": 16, "mem": "64G"}))] == ["S/C/R"]
    assert catalog.eligible_queues(parse_requirements({"cpu": 16, "mem": "64001M"})) == []
    assert catalog.eligible_queues(parse_requirements({"wall": "24h"})) != []
    assert catalog.eligible_queues(parse_requirements({"wall": "24h1s"})) == []
    assert catalog.eligible_queues(parse_requirements({"tmp": 1})) == []
    assert [q.id for q in catalog.eligible_queues(parse_requirements({"Tier": 0}), "lhcb")] == [
        "S/C/Q",
        "S/C/R",
    ]


def test_explain_and_require_eligible_name_each_queue() -> None:
    catalog = Catalog.loads(INHERIT, source="grid.toml")
    req = parse_requirements({"Country": "de", "cpu": 4, "mem": "8G", "wall": "2h"})
    assert catalog.explain(req) == {
        "S/C/Q": "consumables: wants cpu=4, mem=8000 MB, tmp=0 MB, wall=7200 s; no shape holds it "
        "(site-shape has cpu 1, mem 1000 MB)",
        "S/C/R": "Country: wants 'de', queue has 'ch'",
    }
    with pytest.raises(NoEligibleQueue) as caught:
        catalog.require_eligible(req, job="job-3")
    message = str(caught.value)
    assert (caught.value.job, caught.value.field) == ("job-3", "Country")  # without it, S/C/R could run it
    assert message.startswith(
        "job 'job-3', field 'Country': no queue of grid.toml can run it for VO 'default' -- S/C/Q: consumables"
    )
    assert "| S/C/R: Country: wants 'de', queue has 'ch'" in message
    ok = parse_requirements({"Country": "de"})
    assert [q.id for q in catalog.require_eligible(ok, job="j")] == ["S/C/Q"]
    assert catalog.explain(ok) == {"S/C/Q": None, "S/C/R": "Country: wants 'de', queue has 'ch'"}


def test_queue_reason_without_wall_omits_it() -> None:
    queue = Catalog.loads(INHERIT).queue("S/C/R")
    assert queue.reason(parse_requirements({"cpu": 32})) == (
        "consumables: wants cpu=32, mem=0 MB, tmp=0 MB; no shape holds it (big has cpu 16; small has cpu 2)"
    )
    assert isinstance(queue, Queue) and queue.holds(parse_requirements({"cpu": 16}))


def test_local_default_is_this_host() -> None:
    catalog = Catalog.local_default()
    (queue,) = catalog.queues()
    assert queue.id == "local/localhost/local" and queue.batch == "local"
    (shape,) = queue.shapes
    assert shape.cpu == len(os.sched_getaffinity(0))
    assert abs(shape.mem - psutil.virtual_memory().total / 10**6) <= 1
    free = shutil.disk_usage(tempfile.gettempdir()).free / 10**6
    assert shape.tmp > 0 and abs(shape.tmp - free) < 0.05 * free + 100  # other processes write meanwhile
    assert shape.wall == 7 * 86400 and shape.cost == 0
    assert dict(queue.params) == {"Site": "local", "CE": "localhost", "Queue": "local"}
    one_core = parse_requirements({"cpu": 1, "mem": "100M"})
    assert catalog.require_eligible(one_core, job="j") == [queue]


def _key_paths(value: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    found: list[tuple[str | int, ...]] = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _key_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _key_paths(item, (*path, index))
    return found


def test_the_lexer_locates_every_key_of_the_example_on_a_line_that_names_it() -> None:
    import tomllib

    from taskqueues.catalog.positions import Positions  # the lexer: checked directly on a realistic file

    text = EXAMPLE.read_text()
    lines = text.splitlines()
    positions = Positions(text)
    paths = _key_paths(tomllib.loads(text))
    assert len(paths) > 150
    for path in paths:
        assert path in positions.lines, path
        last = path[-1]
        if isinstance(last, str):
            line = lines[positions.lines[path] - 1]
            assert last in line, (path, line)  # a header or "key =" line naming it
