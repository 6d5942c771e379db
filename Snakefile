# celldag: data → preprocessing → training → evaluation → leaderboard, for every dataset × method × seed.
# The logic lives in src/celldag; these files only wire it together. See README.md and docs/.
from snakemake.utils import min_version

min_version("9.1")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/methods.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        PLAN.final_targets,
