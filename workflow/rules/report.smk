from celldag.annotation.scoring import options as celldag_annotation_options
from celldag.results import published as celldag_published
from celldag.errors import InputError


# The shipped reference's seed-noise margins, against which a metric's null–oracle range is judged
# (celldag.results.floor_cards), and its cost per method, against which the default run's cost is checked (celldag.results.qc): read
# when the aggregate runs and recorded in what it writes (floor_cards.parquet's margins, qc.parquet's cost rows).
# Constant paths, not inputs: a reference made or remade after the run reruns no job. A workflow without its
# reference (no file there) judges a range by its sign alone
REFERENCE_NOISE = os.path.join(SHIPPED_REFERENCE, "noise.tsv")
REFERENCE_COST = os.path.join(SHIPPED_REFERENCE, "cost.tsv") if config["name"] == celldag_qc.COST_CONFIG else None


rule aggregate:
    input:
        scores=[*PLAN.dataset_scores, *PLAN.chained_scores],
        records=INPUTS.records,
    output:
        scores=plan.SCORES,
        runs=plan.RUNS,
        floor_cards=plan.FLOOR_CARDS,
        qc=plan.QC,
        leaderboard=plan.LEADERBOARD,
    params:
        baseline=config["evaluation"]["delta_baseline"],
        paired=config["evaluation"]["paired"],
        notes=config["evaluation"]["notes"],
        tracks=all_track_entries(),
        kinds=KINDS_OF_ROWS,
        alpha=celldag_annotation_options(config["evaluation"])["alpha"],  # the annotation scores' α
        missing=celldag_qc.missing_citations(REGISTRIES, PLAN),
        noise=REFERENCE_NOISE,
        cost=REFERENCE_COST,
    log:
        plan.AGGREGATE_LOG,
    conda:
        "../../envs/report.yaml"
    localrule: True
    threads: 1
    resources:
        mem_mb=per_attempt(2000),
        runtime=per_attempt(10),
    script:
        "../scripts/aggregate.py"


# The papers' published tables (config/published/ beside the shipped registries; a module read from a URL or
# git host has none here), checked against the registries when the workflow parses
PUBLISHED_FOLDER = os.path.join(os.path.dirname(SHIPPED_REGISTRIES["datasets"]), "published")
try:
    PUBLISHED = celldag_published.load_published(PUBLISHED_FOLDER, REGISTRIES)
except InputError as err:
    raise WorkflowError(f"invalid published tables: {err}") from None


# results/{name}/index.html (static, opens without a server) and leaderboard.html (for `snakemake --report`)
rule report_html:
    input:
        scores=plan.SCORES,
        runs=plan.RUNS,
        floor_cards=plan.FLOOR_CARDS,
        qc=plan.QC,
        leaderboard=plan.LEADERBOARD,
        figures=PLAN.figure_paths,
        published=celldag_published.published_files(PUBLISHED_FOLDER),  # an edit rebuilds the page
    output:
        index=plan.INDEX,
        leaderboard=report(
            plan.LEADERBOARD_HTML,
            caption="../report/leaderboard.rst",
            category="Leaderboard",
            labels={"table": "leaderboard"},
        ),
    params:
        captions=[
            str(REGISTRIES.track(track_id).figure(f).caption_path())
            for _, _, f, track_id in PLAN.figures
        ],
        figure_tracks=[track_id for *_, track_id in PLAN.figures],
        baseline=config["evaluation"]["delta_baseline"],
        paired=config["evaluation"]["paired"],
        notes=config["evaluation"]["notes"],
        tracks=all_track_entries(),
        kinds=KINDS_OF_ROWS,
        alpha=celldag_annotation_options(config["evaluation"])["alpha"],  # the annotation scores' α
        published=[table for table in PUBLISHED if table.dataset_id in config["datasets"]],
        published_context=celldag_published.context_of(config, PLAN, REGISTRIES, check_downloads=False),
    log:
        plan.REPORT_LOG,
    conda:
        "../../envs/report.yaml"
    localrule: True
    threads: 1
    resources:
        mem_mb=per_attempt(2000),
        runtime=per_attempt(10),
    script:
        "../scripts/report_html.py"
