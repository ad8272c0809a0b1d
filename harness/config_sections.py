"""The sections of the run config (``model:``, ``backend:``, ``rollout:``, ``train:``, ``eval:``, ``tracking:``,
``grid:``, ``method:``): typed dataclasses whose defaults are the paper protocol
(methods/FORMULAS.md#the-paper-protocol). Each field carries its help text and its accepted range; the run config
that holds them, and how a YAML file and overrides become one, are in harness/config.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from harness.core.ranges import Checked
from harness.core.typed import ConfigError


@dataclass
class ModelConfig(Checked):
    section = "model"

    source: str = field(default="tiny", metadata={"help": (
        '"tiny" = the offline Qwen2-architecture model built by harness.policy.tiny_model; a local checkpoint folder '
        "(e.g. a downloaded Qwen2.5-7B-Instruct); or a GGUF file (a .gguf path, or package:<python package>/<file>"
        ".gguf), converted once into a folder under model.cache_dir. Hub ids are not fetched at run time.")})
    dtype: Literal["float32", "bfloat16", "float16"] = field(default="bfloat16", metadata={
        "help": "compute dtype: forward passes run in it through autocast, while the trained weights and AdamW's "
                "state stay float32 (a bf16 weight cannot take a 1e-6 step; harness/policy/precision.py). "
                "float16 needs a GPU"})
    gradient_checkpointing: bool = field(default=True, metadata={
        "help": "recompute activations in the backward pass to save memory (applied on CUDA only)"})
    lora_rank: int = field(default=0, metadata={"range": ">= 0", "help": (
        "LoRA rank r through peft (0 = full fine-tune; verl-agent's 7B LoRA runs: 64). r > 0 trains and checkpoints "
        "the adapter only; the frozen base is held in the compute dtype; the KL reference is the base, adapter off")})
    lora_alpha: int = field(default=64, metadata={"range": ">= 1", "help": (
        "LoRA alpha: the adapter's update is scaled by alpha / rank (verl-agent's 7B LoRA runs, examples/"
        "*_trainer/run_alfworld_lora.sh: 64 at rank 64)")})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "modules that get an adapter (default: every linear projection of a Qwen2 block, as "
                          "verl-agent's all-linear)"})
    tiny_hidden: int = field(default=128, metadata={
        "help": "tiny model: hidden size (ignored for real checkpoints)", "range": ">= 1"})
    tiny_layers: int = field(default=2, metadata={"help": "tiny model: transformer layers", "range": ">= 1"})
    tiny_heads: int = field(default=4, metadata={"help": "tiny model: attention heads", "range": ">= 1"})
    tiny_vocab: int = field(default=2048, metadata={
        "help": "tiny model: size of the BPE vocabulary trained on the benchmark's text", "range": ">= 64"})
    warm_start_epochs: int = field(default=0, metadata={"help": (
        "epochs of the supervised warm start on expert demonstrations (0 = none; the paper starts from an instruct "
        "model)"), "range": ">= 0"})
    warm_start_lr: float = field(default=1e-3, metadata={"help": "learning rate of the warm start", "range": "> 0"})
    warm_start_demos: int = field(default=0, metadata={
        "help": "train tasks the expert demonstrates (0 = the whole train panel)", "range": ">= 0"})
    warm_start_batch: int = field(default=16, metadata={
        "help": "demonstrations per optimizer step of the warm start", "range": ">= 1"})
    warm_start_prompt_loss: float = field(default=0.0, metadata={
        "help": "weight of the next-token loss on prompt tokens in the warm start (teaches copying from the prompt)",
        "range": ">= 0"})
    warm_start_warmup: float = field(default=0.0, metadata={
        "help": "fraction of the warm start's optimizer steps with a linear learning-rate warm-up", "range": "[0, 1]"})
    warm_start_cosine: bool = field(default=False, metadata={
        "help": "decay the warm start's learning rate to 0 on a cosine after the warm-up"})
    warm_start_context_share: float = field(default=0.0, metadata={"range": "[0, 1)", "help": (
        "share of the demonstrated turns also shown under a teacher context (skills, successful sibling, "
        "hindsight; harness/policy/context_demos.py) with the action the context points to, so a model built here "
        "can read the privileged contexts its teacher pass scores (0 = plain demonstrations only)")})
    warm_start_max_grad_norm: float | None = field(default=None, metadata={
        "help": "gradient-norm clipping in the warm start (null = off)", "range": "> 0"})
    cache_dir: str = field(default="results/models", metadata={
        "help": "where built tiny models and converted GGUF models are cached, keyed by everything they depend on"})

    def __post_init__(self):
        super().__post_init__()
        if self.tiny_hidden % self.tiny_heads:
            raise ConfigError(f"model.tiny_hidden: {self.tiny_hidden} is not a multiple of model.tiny_heads="
                              f"{self.tiny_heads}; accepted: a multiple of the head count")


@dataclass
class BackendConfig(Checked):
    section = "backend"

    name: str = field(default="vllm", metadata={
        "help": "generation backend (harness/policy/backends/: BACKENDS): hf = transformers on the policy itself "
                "(CPU or GPU), vllm = a vLLM engine (GPU)"})
    gpu_memory_utilization: float = field(default=0.6, metadata={
        "help": "vllm: share of GPU memory vLLM may take", "range": "(0, 1]"})
    tensor_parallel_size: int | None = field(default=None, metadata={
        "help": "vllm: GPUs the engine is sharded over (null = the run's GPU count, grid.gpus; "
                "1 under train.strategy=fsdp, where each rank has its own engine)", "range": ">= 1"})
    max_model_len: int | None = field(default=None, metadata={
        "help": "vllm: longest prompt + response it must hold (null = rollout.max_prompt_tokens + "
                "rollout.max_response_tokens)", "range": ">= 1"})
    enforce_eager: bool = field(default=False, metadata={
        "help": "vllm: skip CUDA-graph capture (faster start, slower decode)"})
    sleep_level: int | None = field(default=None, metadata={
        "help": "vllm: 2 = the sleeping engine's weights are discarded and every sync re-sends them (verl's and TRL's "
                "default: no 15 GB copy to the CPU and back a step), checked against the trainer's log-probs after "
                "every sync; 1 = they go to CPU memory and back; null = 2, or 1 under LoRA (its sync sends the "
                "adapter only, never the base)", "range": "[1, 2]"})


@dataclass
class RolloutConfig(Checked):
    section = "rollout"

    tasks_per_step: int = field(default=16, metadata={"help": "train tasks drawn per RL step", "range": ">= 1"})
    group_size: int = field(default=8, metadata={"help": "G: rollouts per task (one GRPO group)", "range": ">= 1"})
    temperature: float = field(default=1.0, metadata={
        "help": "sampling temperature of training rollouts", "range": ">= 0"})
    top_p: float = field(default=1.0, metadata={
        "help": "nucleus sampling of training and evaluation rollouts", "range": "(0, 1]"})
    max_prompt_tokens: int = field(default=2048, metadata={
        "help": "prompts longer than this keep their last tokens", "range": ">= 1"})
    teacher_context_tokens: int = field(default=4096, metadata={"range": ">= 0", "help": (
        "room a teacher's privileged prompt gets on top of max_prompt_tokens for its context (skill text, a "
        "successful sibling's actions, hindsight); a run whose benchmark's worst-case context needs more refuses "
        "to start and says the value (default: ALFWorld's 50-step sibling list + hindsight, at one token a byte)")})
    max_response_tokens: int = field(default=512, metadata={
        "help": "tokens generated per turn at most", "range": ">= 1"})
    history_length: int = field(default=2, metadata={
        "help": "past (observation, action) pairs shown in the prompt", "range": ">= 0"})
    think: bool = field(default=True, metadata={
        "help": "require <think>...</think> before <action>...</action>; every benchmark's prompt follows it"})
    require_admissible: bool = field(default=False, metadata={
        "help": "an action outside the admissible list counts as invalid"})
    env_workers: int = field(default=4, metadata={
        "help": "worker processes stepping envs, for the whole job (train.strategy=fsdp: split over the ranks); "
                "0 = in this process", "range": ">= 0"})
    max_failure_frac: float = field(default=0.5, metadata={"range": "[0, 1]", "help": (
        "share of a step's episodes that may end in an environment failure (crashed or hung worker); above it "
        "the run stops with the worker's last traceback. Failed episodes are never learned from (docs/recovery.md)")})
    generation_batch: int = field(default=64, metadata={
        "help": "envs generated for in one backend call", "range": ">= 1"})


@dataclass
class TrainConfig(Checked):
    section = "train"

    steps: int = field(default=200, metadata={"help": "RL steps", "range": ">= 1"})
    lr: float = field(default=1e-6, metadata={
        "help": "AdamW learning rate; 0 = the frozen control: no update runs (train.updates_weights)", "range": ">= 0"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "range": ">= 0"})
    ppo_mini_batch: int = field(default=256, metadata={"help": "rows (segments) per optimiser step", "range": ">= 1"})
    ppo_micro_batch: int = field(default=8, metadata={
        "help": "rows per forward pass (gradient accumulation inside a mini-batch; also the scoring batch)",
        "range": ">= 1"})
    ppo_epochs: int = field(default=1, metadata={"help": "passes over the batch per RL step", "range": ">= 1"})
    clip_ratio: float = field(default=0.2, metadata={"help": "PPO clip ε of the ratio π_θ/π_old", "range": "> 0"})
    clip_ratio_c: float = field(default=3.0, metadata={
        "help": "verl's dual clip for negative advantages: the per-token loss is capped at −A·c (c > 1)",
        "range": "> 1"})
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
        field(default="token-mean", metadata={"help": "how the per-token loss becomes a scalar (verl's agg_loss)"})
    )
    kl_coef: float = field(default=0.01, metadata={
        "help": "weight of the KL-to-reference loss term (0 = no term and no reference model)", "range": ">= 0"})
    reference_offload: bool = field(default=True, metadata={"help": (
        "full fine-tune on CUDA: keep the frozen KL reference copy in CPU memory, streamed to the GPU layer by layer "
        "(accelerate's cpu_offload); false = a full copy on the GPU. Unused on the CPU, with LoRA and at kl_coef 0")})
    kl_estimator: Literal["k1", "k2", "k3"] = field(default="k3", metadata={
        "help": "per-token KL estimator; k3 is the low-variance one"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clipping of the RL update", "range": "> 0"})
    checkpoint_every: int = field(default=10, metadata={
        "help": "RL steps between checkpoints (and at the last step)", "range": ">= 1"})
    device: str = field(default="auto", metadata={"help": '"auto" | "cpu" | "cuda"'})
    strategy: Literal["single", "fsdp"] = field(default="single", metadata={
        "help": "single = one training process; fsdp = one process per GPU (grid.gpus of them, launched by torchrun), "
                "weights, gradients and optimizer state sharded with FSDP, rollouts split over the processes "
                "(harness/engine/distributed.py; README: A run on k GPUs)"})
    process_group_timeout_min: float = field(default=30.0, metadata={"range": "(0, 1440]", "help": (
        "train.strategy=fsdp: minutes one collective (NCCL on GPUs, gloo on the CPU) waits for the other ranks before "
        "the run fails, so a hung rank costs this long on every GPU (was 3 h: 24 GPU-hours on 8). It must exceed the "
        "longest wait by design, one rank's share of a rollout or an evaluation outlasting another's. Not part of "
        "the run's identity")})
    memory_reserve_gib: float = field(default=6.0, metadata={"range": "[0, 64]", "help": (
        "GiB the memory plan keeps free on every GPU in every phase for what it does not count: the CUDA context "
        "(~0.5-1), the CUDA graphs a sleeping vLLM engine keeps (1-3), NCCL buffers (~1) and the allocator's "
        "fragmentation; 6-8 is typical, `scripts/gpu_check.sh` measures the real figure. Planning only: not part "
        "of the run's identity")})
    cpu_threads: int = field(default=0, metadata={
        "help": "torch intra-op threads on the CPU (0 = torch's default); 1 suits parallel tiny jobs", "range": ">= 0"})

    @property
    def updates_weights(self) -> bool:
        """False at lr 0 (the grid's frozen control): AdamW then moves no weight, so the engine skips the update
        (no reference scoring, backward or optimizer step) and the control costs only its rollouts and evals."""
        return self.lr > 0


@dataclass
class EvalConfig(Checked):
    section = "eval"

    every: int = field(default=5, metadata={
        "help": "RL steps between evaluations (0 = only the final one)", "range": ">= 0"})
    temperature: float = field(default=0.4, metadata={
        "help": "sampling temperature of evaluation episodes", "range": ">= 0"})
    split: str = field(default="eval_out", metadata={"help": "panel evaluated: eval_in or eval_out (or train)"})
    panel_size: int | None = field(default=None, metadata={
        "help": "evaluate on the first this many tasks of the panel (null = the benchmark's full panel)",
        "range": ">= 1"})
    at_start: bool = field(default=True, metadata={"help": "also evaluate before the first RL step"})


@dataclass
class TrackingConfig(Checked):
    section = "tracking"

    enabled: bool = field(default=True, metadata={
        "help": "log to MLflow (the run folder's csv files are written either way)"})
    uri: str = field(default="${MLFLOW_TRACKING_URI:-sqlite:///results/mlflow.db}", metadata={
        "help": "MLflow store; ${VAR:-default} reads the environment: a cluster exports MLFLOW_TRACKING_URI="
                "http://<head node>:5000 (an mlflow server), locally it is the sqlite file"})
    artifact_root: str = field(default="results/mlartifacts", metadata={
        "help": "where MLflow stores artifacts of new experiments"})
    request_timeout_s: float = field(default=10.0, metadata={"range": "> 0", "help": (
        "seconds one request to a tracking server may take; a slower or absent server is retried off the training "
        "path (docs/recovery.md), never by MLflow's own minutes of retries")})
    retry_max_s: float = field(default=60.0, metadata={"range": "> 0", "help": (
        "longest wait between two attempts to reach an absent tracking server (the waits double from 1 s)")})
    flush_timeout_s: float = field(default=60.0, metadata={"range": ">= 0", "help": (
        "how long a finishing run waits for an absent tracking server; what is still unsent is named in done.json "
        "and sent by `python -m harness sync <run folder>` or the run's next start")})


@dataclass
class GridConfig(Checked):
    section = "grid"

    """What ``snakemake`` expands into runs (the Snakefile reads this section of the profile)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={
        "help": "master seeds of the grid", "range": ">= 0"})
    benchmarks: list[str] = field(default_factory=lambda: ["alfworld", "webshop"], metadata={
        "help": "benchmarks of the grid"})
    methods: list[Any] = field(
        default_factory=lambda: ["grpo", "grpo_opsd", "rlsd", "sdar", "stepopsd", "sharpo"],
        metadata={"help": (
            "a method is a registry name, or a mapping {name: ..., option: value} for a variant (e.g. a λ sweep)")},
    )
    published: str = field(default="sharpo_2610.00838.csv", metadata={
        "help": "the published numbers the main table prints beside the grid's: a CSV in paper_figures/reference/ "
                "(benchmark, method, success_pct, plus_minus, source, notes)"})
    gpus: int = field(default=1, metadata={
        "help": "GPUs one train job asks the scheduler for (Snakemake resources; SLURM gets the same)",
        "range": ">= 0"})
    mem_mb: int = field(default=64_000, metadata={"help": "memory (MB) one train job asks for", "range": ">= 1"})
    threads: int = field(default=8, metadata={"help": "CPU threads one train job asks for", "range": ">= 1"})
    runtime_min: int = field(default=24 * 60, metadata={
        "help": "wall time (minutes) a run needs; one train job asks for it, unless slice_min cuts it into slices",
        "range": ">= 1"})
    slice_min: int | None = field(default=None, metadata={
        "help": "longest one train job may run (the partition's time limit): a longer run becomes a chain of "
                "ceil(runtime_min / slice_min) jobs, each resuming from the checkpoint the previous one saved at "
                "SLURM's SIGTERM (harness/job_slices.py); null = one job of runtime_min; "
                "`snakemake --config slice_min=N` overrides it", "range": ">= 1"})
    frozen_control: bool = field(default=False, metadata={
        "help": "add one run per benchmark and seed at train.lr = 0, labelled `frozen`: the warm start evaluated on "
                "the same tasks with the same sampling seeds, the control each method's gain is measured against"})
    compute_matched: bool = field(default=False, metadata={
        "help": "add a GRPO arm per benchmark and seed, labelled `grpo_compute_matched`, with more rollouts per group "
                "(and, only if that cannot come within 5%, more steps) so that its counted compute equals the grid's "
                "costliest method's (harness/grid/compute_match.py); its PPO mini-batch grows with the group, so it "
                "takes GRPO's optimizer steps a step"})
    compute_basis: str | None = field(default=None, metadata={
        "help": "JSON of the tokens a rollout row holds for the student and for each teacher context, measured by "
                "`python -m paper_figures.compute_basis` from logged runs: the compute-matched arm is planned from "
                "it; unset: from the token budgets (an upper bound)"})
    settings: list[dict] = field(default_factory=list, metadata={
        "help": "config settings the grid sweeps, each a mapping {dotted key: value} (e.g. {gates.horizon: 8}): "
                "every method and seed runs once per setting, in its own folder, labelled <method>@<key><value> "
                "(e.g. grpo@horizon8); empty = the profile as it is"})


@dataclass
class MethodSection(Checked):
    section = "method"

    name: str = field(default="grpo", metadata={
        "help": "registry name of the method (see below), or a dotted path pkg.module:Class"})
    options: dict = field(default_factory=dict, metadata={
        "help": "the method's options; usually written beside name (method.lam=0.2), see below"})

    @property
    def config(self):
        """The method's own ``Config`` (its paper defaults plus ``options``), built and range-checked once — when
        the run config loads (harness.config) — and read everywhere else: the run's label, its identity, the
        method the engine builds. Kept beside the fields, not as one, so the run's recorded config is unchanged."""
        built = self.__dict__.get("_config")
        if built is None:
            from harness.core import registry
            from harness.core.typed import build_dataclass

            built = build_dataclass(registry.get(self.name).Config, dict(self.options), where=f"method ({self.name})")
            self.__dict__["_config"] = built
        return built
