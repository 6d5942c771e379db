# A lab's own cells annotated from a labelled registry dataset (config `annotate`, docs/annotation.md): the
# reference's prepared file comes from prepare_dataset like any other, the query is the lab's file; one job per
# query writes results/<name>/annotate/<query>/ (celldag.commands.annotate, the same as `celldag annotate`).


rule annotate_query:
    input:
        reference=lambda wildcards: ANNOTATE_REFERENCES[wildcards.query],
        query=lambda wildcards: config["annotate"][wildcards.query]["query"],
        # a CellTypist model (a registry model: its verified download) and its label map, or another tool's scores,
        # where the query names them: a new file reruns the query
        model=lambda wildcards: [ANNOTATE_SETTINGS[wildcards.query][key]
                                 for key in ("model", "label_map", "probabilities")
                                 if key in ANNOTATE_SETTINGS[wildcards.query]],
    output:
        directory(plan.ANNOTATED),
    params:
        settings=lambda wildcards: ANNOTATE_SETTINGS[wildcards.query],
        methods=lambda wildcards: annotate_methods(wildcards.query),
    wildcard_constraints:
        query=_one_of(config["annotate"]) if config["annotate"] else "(?!)",
    log:
        plan.ANNOTATE_LOG,
    conda:
        "../../envs/representation.yaml"
    threads: 1
    resources:
        mem_mb=per_attempt(4000),
        runtime=per_attempt(60),
    script:
        "../scripts/annotate_query.py"


# `snakemake annotate`: the config's queries alone, and what they read (the references' prepared files). A config
# holding only `annotate:` keeps the default selection, which `snakemake` without a target runs as well.
rule annotate:
    input:
        PLAN.annotated,
    localrule: True
