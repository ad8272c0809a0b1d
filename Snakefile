"""Reproduce the paper: seeds × methods × benchmarks → train runs → tables → figures.

    snakemake --cores 2                                         # profile "cpu" (Gates, tiny model, CPU)
    snakemake --cores 2 --config profile=tiny                   # ALFWorld + WebShop on the CPU
    snakemake --cores 2 --config profile=smoke                  # CI: 2 methods × 1 benchmark × 1 seed
    snakemake --cores all --resources gpu=8 --config profile=paper # the 7B protocol on one 8-GPU machine
    snakemake --cores all --resources gpu=8 --config profile=paper_lora  # its LoRA variant, one GPU a run
    snakemake --profile profiles/slurm --config profile=paper      # the same 36 jobs on a SLURM cluster
    snakemake runs --cores 2                                    # train only, no tables
    snakemake --cores 2 --config profile=sweep                  # the horizon sweep (grid.settings): + sweep figure

Config keys (``--config key=value``):
    profile      cpu | tiny | smoke | smol | paper | paper_lora, or a path to a YAML profile (default cpu): the
                 harness's run profile (what to train). Snakemake's own ``--profile profiles/<name>`` is another
                 thing: how to launch jobs (locally, or through SLURM). The harness profile is read from
                 config/<profile>.yaml, whose ``grid:`` section (harness.config.GridConfig) lists the seeds,
                 benchmarks and methods, and what one train job asks the scheduler for.
    config_dir   where profiles live (default config)
    results      where tables/ and figures/ go (default results)
    train_cmd    the training command (default: this Python's ``-m harness train``, or under the profile's
                 ``train.strategy: fsdp`` ``-m torch.distributed.run --standalone --nproc_per_node <grid.gpus> -m
                 harness train``); it gets
                 ``--config <profile.yaml> --resume benchmark=... method=... [method.<opt>=...] seed=...``
    reps         bootstrap resamples for the rliable statistics (default 2000)
    slice_min    longest one train job may run (your partition's time limit; default: the profile's
                 grid.slice_min): a longer run is a chain of jobs, each resuming the run (harness/job_slices.py)

A finished run folder holds ``done.json`` (written last by the engine), the train job's only output: a run whose
``done.json`` exists is not re-run, so killing snakemake and starting it again finishes only the missing runs —
unless the profile changed that run's protocol: the job's ``identity`` param (the run's config hash) then differs
from the one it ran with, ``rerun-triggers: [mtime, params]`` (profiles/default) schedules it again, and the
engine starts the stale folder over.
Runs go to ``<output_dir>/<benchmark>/<method_label>/seed<seed>/`` (output_dir from the profile, default
results/runs); the label comes from harness.config.method_label, the function the engine names its folders with.
"""
import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

# harness and paper_figures come from the installed package (make setup: pip install -e .)
from harness.gpu_slots import job_threads, train_command, wrapper_prefix
from harness.grid.runs import load_grid
from harness.grid.identity import grid_identities
from harness.job_slices import job_slices

PROFILE = str(config.get("profile", "cpu"))
CONFIG_DIR = str(config.get("config_dir", "config"))
GRID = load_grid(PROFILE, CONFIG_DIR)
RUNS = GRID.output_dir
RESULTS = str(config.get("results", f"results/{GRID.profile}"))  # tables, figures, logs of this profile
# train.strategy=fsdp: torchrun starts one process per GPU of the job (harness/engine/distributed.py); else one process
PROFILE_ARG = shlex.quote(str(GRID.profile_path))  # not a param of the train rule (see its shell command)
TRAIN_CMD = str(config.get("train_cmd", train_command(sys.executable, GRID.resources["strategy"], GRID.resources["gpus"])))
PYTHON = shlex.quote(sys.executable)
RUN_DIR = RUNS + "/{benchmark}/{label}/seed{seed}"
# a run longer than one job may last: slices of slice_min minutes, each resumed by a retry (harness/job_slices.py)
SLICES = job_slices(GRID.profile_path, config.get("slice_min"))
IDENTITY = grid_identities(GRID)  # run key -> config identity (harness.records.protocol.config_hash), ~10 ms a run
# Local runs: each train job gets its own GPUs out of the --resources gpu=G declared (harness/gpu_slots.py), and
# threads shared so that the cores never hold back a free GPU. A cluster executor places jobs itself.
LOCAL = workflow.local_exec and not workflow.remote_exec
DECLARED_GPUS = getattr(workflow.global_resources.get("gpu"), "value", None)  # None: no --resources gpu=G
GPU_SLOTS = wrapper_prefix(sys.executable, GRID.resources["gpus"], DECLARED_GPUS,
                           os.environ.get("CUDA_VISIBLE_DEVICES"), LOCAL)


def declared_cores():
    """--cores N, or None where it was not given."""
    try:
        return workflow.cores
    except WorkflowError:
        return None


TRAIN_THREADS = job_threads(GRID.resources["threads"], GRID.resources["gpus"], DECLARED_GPUS,
                            declared_cores() if LOCAL else None)

wildcard_constraints:
    benchmark="[A-Za-z0-9_]+",
    label="[^/]+",
    seed="[0-9]+",

localrules: all, runs, paper_figures


# a grid that sweeps settings (grid.settings, e.g. config/sweep.yaml) also gets the sweep's table and figure
SWEEP_FILES = (expand(RESULTS + "/tables/sweep.{ext}", ext=["csv", "md", "tex"])
               + expand(RESULTS + "/figures/sweep.{ext}", ext=["png", "pdf"])) if GRID.settings else []


rule all:
    input:
        expand(RESULTS + "/tables/main.{ext}", ext=["csv", "md", "tex"]),
        expand(RESULTS + "/figures/learning_curves.{ext}", ext=["png", "pdf"]),
        SWEEP_FILES,


rule runs:
    input:
        [f"{RUNS}/{run.key}/done.json" for run in GRID.runs],


rule train:
    """One (benchmark, method variant, seed) run; the engine writes done.json last."""
    output:
        RUN_DIR + "/done.json",
    log:
        RESULTS + "/logs/{benchmark}/{label}/seed{seed}.log",
    params:
        overrides=lambda w: " ".join(GRID.run(f"{w.benchmark}/{w.label}/seed{w.seed}").overrides()),
        # the run's config identity: a profile change that changes this run's protocol changes it, and
        # rerun-triggers params (profiles/) re-runs the job; the engine then starts the stale folder over
        identity=lambda w: IDENTITY[f"{w.benchmark}/{w.label}/seed{w.seed}"],
    threads: TRAIN_THREADS
    resources:
        gpu=GRID.resources["gpus"],
        mem_mb=GRID.resources["mem_mb"],
        runtime=SLICES.slice_min,
    shell:
        # --resume: a run cut off earlier (killed, preempted, crashed) continues from its last checkpoint;
        # --restart-if-changed: a folder made under another protocol (the profile changed) is started over.
        # TRAIN_CMD is not a param: changing the command alone must not retrain finished runs. Nor is the profile's
        # path: a profile that shares another's runs folder (cpu_more, cpu) asks for the same runs under its name.
        "{GPU_SLOTS}{TRAIN_CMD} --config {PROFILE_ARG} --resume --restart-if-changed {params.overrides} > {log} 2>&1"


onstart:
    # A slice ends with SLURM's SIGTERM: the run saves and exits 75, and a retry resumes it. Every slice after the
    # first is a retry of the train job, on top of the --retries a profile allows for failures; set here because
    # --retries is known only once the workflow starts, not while the rules are read.
    rules.train.rule.restart_times = SLICES.retries(workflow.execution_settings.retries)


rule paper_figures:
    """Tables and figures from every finished run; the grid's unfinished runs are marked missing."""
    input:
        rules.runs.input,
    output:
        expand(RESULTS + "/tables/main.{ext}", ext=["csv", "md", "tex"]),
        expand(RESULTS + "/figures/learning_curves.{ext}", ext=["png", "pdf"]),
    params:
        reps=int(config.get("reps", 2000)),
        profile=shlex.quote(str(GRID.profile_path)),
    log:
        RESULTS + "/logs/paper_figures.log",
    shell:
        "{PYTHON} -m paper_figures --runs {RUNS:q} --out {RESULTS:q} --profile {params.profile} "
        "--config-dir {CONFIG_DIR:q} --reps {params.reps} > {log} 2>&1"


if SWEEP_FILES:
    rule sweep_figure:
        """Final success and the credit scores against the swept setting, per method (paper_figures/sweep.py)."""
        input:
            rules.runs.input,
        output:
            SWEEP_FILES,
        params:
            profile=shlex.quote(str(GRID.profile_path)),
        log:
            RESULTS + "/logs/sweep_figure.log",
        shell:
            "{PYTHON} -m paper_figures.sweep --runs {RUNS:q} --out {RESULTS:q} --profile {params.profile} "
            "--config-dir {CONFIG_DIR:q} > {log} 2>&1"

    localrules: sweep_figure
