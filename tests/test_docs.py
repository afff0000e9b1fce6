"""The front door: a README a newcomer reads in minutes, docs in a user's words, figures from the run's records.

pytest tests/test_docs.py      (seconds, no torch)
"""

import copy
import json
import re
from pathlib import Path

import pytest

from bakeoff.core.clock_record import ClockRecord
from bakeoff.decide.metrics_record import MetricsFile
from bakeoff.report import readme
from bakeoff.report.glossary import glossary_lines

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
PROSE = [*PAGES, ROOT / "params.yaml"]
CODE = [
    p
    for d in ("src", "stages", "benchmarks", "tests")
    for p in sorted((ROOT / d).rglob("*.py"))
    if p.name != "test_docs.py"
]
TOPICS = [
    "evaluation",
    "search-and-fairness",
    "statistics",
    "sizing",
    "endpoints",
    "mlflow",
    "several-machines",
    "clock",
    "hardware",
    "data-checks",
    "params",
    "architecture",
    "glossary",
    "report",
    "tasks",
    "variants",
    "export",
]

# words of the people who build bakeoff, not of the people who use it
INTERNAL = [
    (re.compile(r"\bissues? #?\d+", re.IGNORECASE), "an issue number"),
    (re.compile(r"\bthis session\b", re.IGNORECASE), "'this session'"),
    (re.compile(r"\bseed's claim\b", re.IGNORECASE), "'the seed's claim'"),
    (
        re.compile(r"\.\./shared\b|\bshared/(?:design|fairness-facts|sizing-facts|platform-facts|style)\.md"),
        "a file outside the repository",
    ),
    (re.compile(r"\bby floor\b", re.IGNORECASE), "'by floor'"),
]
HASH = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])")


def internal_words(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for rx, what in INTERNAL for m in rx.finditer(text)]


def test_the_readme_is_short_and_gives_the_two_commands_first():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first_block = text.split("```", 2)[1]
    assert "make repro" in first_block and "make test" in first_block


@pytest.mark.parametrize("topic", TOPICS)
def test_every_topic_has_its_page_and_the_readme_links_it(topic):
    assert (ROOT / "docs" / f"{topic}.md").is_file()
    assert f"(docs/{topic}.md" in (ROOT / "README.md").read_text()


def test_no_internal_words_in_the_readme_docs_params_or_code():
    found = {str(p.relative_to(ROOT)): internal_words(p.read_text()) for p in [*PROSE, *CODE]}
    found = {k: v for k, v in found.items() if v}
    assert not found, found


def test_the_internal_words_check_catches_each_kind():
    for planted in ("fixed in issue 38", "as this session found", "(../shared/design.md)", "the seed's claim"):
        assert internal_words(f"Some prose {planted}."), planted
    assert not internal_words("The search reissues 3 trials; see docs/design.md.")


def test_no_commit_hash_in_prose_outside_a_provenance_line():
    found = []
    for p in PROSE:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if "provenance" in line.lower() or "commit" in line.lower() and "|" in line:
                continue
            found += [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for m in HASH.finditer(line)]
    assert not found, found
    assert HASH.search("the run at a93774c took") and not HASH.search("lr 1e-4, data/raw/make_intents.py, deadbeef")


def test_every_link_in_the_readme_and_docs_leads_to_a_file_that_exists():
    broken = []
    for p in PAGES:
        for target in re.findall(r"\]\(\s*([^)#\s]+)(?:#[^)]*)?\)", p.read_text()):
            if "://" not in target and not (p.parent / target).exists():
                broken.append(f"{p.relative_to(ROOT)} → {target}")
    assert not broken, broken


def headings(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces to hyphens, a repeated
    heading numbered (-1, -2); headings inside code blocks are none."""
    seen, out, code = {}, set(), False
    for line in page.read_text().splitlines():
        code = code != line.startswith("```")
        m = None if code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen[slug] = seen.get(slug, -1) + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_anchors(page: Path) -> list[str]:
    """Links from ``page`` to a heading (``#x`` on the page, ``other.md#x`` on another) that the target lacks."""
    broken = []
    for target, anchor in re.findall(r"\]\(\s*([^)#\s]*)#([^)\s]+)\)", page.read_text()):
        dest = page if not target else page.parent / target
        if dest.suffix == ".md" and dest.is_file() and anchor not in headings(dest):
            broken.append(f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name} → {target}#{anchor}")
    return broken


def test_every_link_to_a_heading_finds_it_on_its_page_or_another():
    broken = [b for p in PAGES for b in broken_anchors(p)]
    assert not broken, broken


def test_the_heading_check_catches_a_heading_that_was_renamed(tmp_path):
    (tmp_path / "other.md").write_text("# Several GPUs and several machines\n\n## Several machines\n```\n# not\n```\n")
    (tmp_path / "page.md").write_text(
        "## Run `it`, twice!\n\n## Run `it`, twice!\n\n"
        "[a](#run-it-twice) [b](#run-it-twice-1) [c](other.md#several-machines) "
        "[d](other.md#run-it-on-several-machines) "
        "[e](#not) [f](other.md#not)\n"
    )
    assert broken_anchors(tmp_path / "page.md") == [
        "page.md → other.md#run-it-on-several-machines",
        "page.md → #not",
        "page.md → other.md#not",
    ]


def test_the_readme_figures_are_the_committed_records():
    """The README's block is what ``python -m bakeoff.report.readme`` writes from reports/metrics.json and
    reports/clock.json; a stale or hand-typed figure fails here."""
    text = (ROOT / "README.md").read_text()
    metrics = json.loads((ROOT / "reports/metrics.json").read_text())
    clock = ClockRecord.from_dict(json.loads((ROOT / "reports/clock.json").read_text()))
    assert readme.rewrite(text, MetricsFile.from_dict(metrics), clock) == text, (
        "stale: run python -m bakeoff.report.readme"
    )
    assert readme.main(["--check", "--root", str(ROOT)]) == 0
    block = text.split(readme.BEGIN)[1].split(readme.END)[0]
    v = metrics["verdict"]
    assert f"{100 * v['gain']:+.1f} points" in block and v["decision"] in block and v["variant"] in block


def test_a_planted_stale_figure_fails_the_readme_check(tmp_path):
    for name in ("README.md", "reports/metrics.json", "reports/clock.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    assert readme.main(["--check", "--root", str(tmp_path)]) == 0
    metrics = json.loads((ROOT / "reports/metrics.json").read_text())
    stale = copy.deepcopy(metrics)
    stale["verdict"]["ci_low"] -= 0.013  # a refreshed run's interval
    (tmp_path / "reports/metrics.json").write_text(json.dumps(stale))
    assert readme.main(["--check", "--root", str(tmp_path)]) == 1
    readme.main(["--root", str(tmp_path)])  # the fix the message names
    assert readme.main(["--check", "--root", str(tmp_path)]) == 0
    assert f"[{100 * stale['verdict']['ci_low']:+.1f}," in (tmp_path / "README.md").read_text()


def test_the_run_time_is_the_newest_run_of_every_stage_not_a_partial_one():
    clock = {
        "runs": [
            {"completed": True, "stages_planned": 26, "stages_ran": 26, "actual_total_s": 6460.6, "machine": "m"},
            {"completed": True, "stages_planned": 1, "stages_ran": 1, "actual_total_s": 15.0, "machine": "m"},
            {"completed": False, "stages_planned": 26, "stages_ran": 9, "actual_total_s": 900.0, "machine": "m"},
        ]
    }
    assert readme.full_run(ClockRecord.from_dict(clock)).actual_total_s == 6460.6
    # the base model restored from DVC's cache, every other stage run: a whole run, said so; a run mostly restored
    # from the cache is not one
    clock["runs"] += [
        {
            "completed": True,
            "stages_planned": 26,
            "stages_ran": 25,
            "stages_restored": 1,
            "actual_total_s": 7000.0,
            "machine": "m",
        },
        {
            "completed": True,
            "stages_planned": 26,
            "stages_ran": 2,
            "stages_restored": 24,
            "actual_total_s": 40.0,
            "machine": "m",
        },
    ]
    assert readme.full_run(ClockRecord.from_dict(clock)).actual_total_s == 7000.0
    metrics = json.loads((ROOT / "reports/metrics.json").read_text())
    assert "- `make repro` (25 stages run, 1 restored from DVC's cache) took 1 h 57 min on m" in readme.block(
        MetricsFile.from_dict(metrics), ClockRecord.from_dict(clock)
    )
    assert readme.duration(6460.6) == "1 h 48 min" and readme.duration(3120) == "52 min"


def test_the_docs_glossary_holds_every_term_of_the_report():
    page = (ROOT / "docs" / "glossary.md").read_text()
    missing = [line for line in glossary_lines() if line.startswith("- ") and line not in page]
    assert not missing, missing


def test_every_committed_picture_shows_the_reports_commit():
    """``make screenshots`` stamps each picture with the commit of the report it shows; a picture left from an
    older run (or one that never went through it) fails here."""
    from bakeoff.run import screenshots

    commit = screenshots.report_commit(ROOT)
    pictures = [ROOT / screenshots.REPORT_PNG, ROOT / screenshots.MLFLOW_PNG, ROOT / screenshots.CURVES_PNG]
    shown = [p for p in pictures if p.exists()]
    assert ROOT / screenshots.REPORT_PNG in shown, "reports/comparison.png: run make screenshots"
    wrong = {str(p.relative_to(ROOT)): screenshots.stamped(p) for p in shown if screenshots.stamped(p) != commit}
    assert not wrong, f"pictures not of the report at {commit[:12]}: {wrong}; run make screenshots after make repro"
    for p in shown:
        assert f"]({p.relative_to(ROOT)})" in (ROOT / "README.md").read_text(), f"the README does not show {p}"


def test_a_stamp_is_read_back_and_the_pixels_are_kept(tmp_path):
    from PIL import Image

    from bakeoff.run import screenshots

    png = tmp_path / "a.png"
    Image.new("RGB", (4, 3), (10, 20, 30)).save(png)
    assert screenshots.stamped(png) is None
    screenshots.stamp(png, "0123456789abcdef0123456789abcdef01234567")
    assert screenshots.stamped(png) == "0123456789abcdef0123456789abcdef01234567"
    with Image.open(png) as im:
        assert im.size == (4, 3) and im.getpixel((1, 1)) == (10, 20, 30)


def test_the_screenshot_error_never_prints_a_password(monkeypatch, tmp_path):
    """An MLflow URI from the environment may carry a password; the screenshot's error names the store without it."""
    import mlflow

    from bakeoff.core import tracking
    from bakeoff.core.config import load_params
    from bakeoff.run import screenshots

    class NoExperiment:  # the store answers, but holds no run of this task
        def get_experiment_by_name(self, name):
            return None

    monkeypatch.setattr(tracking, "tracking_uri", lambda params: "http://bob:hunter2@127.0.0.1:5000")
    monkeypatch.setattr(mlflow, "MlflowClient", NoExperiment)
    with pytest.raises(SystemExit) as stop:
        screenshots.mlflow_picture(None, load_params(ROOT / "params.yaml"), "0" * 40, tmp_path / "x.png")
    assert "no repro run" in str(stop.value) and "127.0.0.1:5000" in str(stop.value)
    assert "hunter2" not in str(stop.value)


def test_the_committed_report_is_the_one_compare_wrote_from_todays_params():
    """The committed report was written by the `compare` stage dvc.lock records, from params.yaml as it is: every
    params key compare depends on (verdict, cost, sizing, curve, the arms) holds the value it ran with, and every file
    it wrote is the committed one. A key changed after the run, or a report edited by hand, fails here:
    run `make repro` (or `dvc repro compare` where only compare's inputs changed)."""
    import hashlib

    import yaml

    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]["compare"]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())

    def value(key: str):
        node = params
        for part in key.split("."):
            node = (node or {}).get(part)
        return node

    def same(a, b) -> bool:  # dvc.lock writes 5e-05, which YAML 1.1 (PyYAML) reads back as a string
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, str) != isinstance(b, str) and not isinstance(a, bool) and not isinstance(b, bool):
            try:
                return float(a) == float(b)
            except (TypeError, ValueError):
                return False
        return a == b

    ran = lock["params"]["params.yaml"]
    stale = [k for k, v in ran.items() if not same(value(k), v)]
    assert not stale, f"params.yaml's {stale} differ from what the committed report was made with: run make repro"
    edited = [
        o["path"]
        for o in lock["outs"]
        if (ROOT / o["path"]).is_file() and hashlib.md5((ROOT / o["path"]).read_bytes()).hexdigest() != o["md5"]
    ]
    assert not edited, f"{edited} are not what compare wrote (dvc.lock): run make repro"
