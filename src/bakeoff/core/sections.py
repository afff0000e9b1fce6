"""The sections of params.yaml as frozen dataclasses: each field's default is the shipped params.yaml's value (a test
holds them equal), its comment what it does; ``bakeoff.core.config`` builds and checks them from the file.

    from bakeoff.core.sections import TrainConfig, VariantConfig
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bakeoff.core.schema import ParamsError, suggest
from bakeoff.core.spaces import TuneConfig
from bakeoff.core.techniques import FACTS


@dataclass(frozen=True)
class ModelConfig:
    base: str = "smollm2-135m-instruct"  # alias, local folder or hub id
    dtype: str = "auto"  # dtype the weights are stored in: auto | float32 | bfloat16 | float16
    trust_remote_code: bool = False


@dataclass(frozen=True)
class TaskConfig:
    name: str = "task"
    train: str = "data/raw/train.jsonl"
    val: str | None = None
    test: str | None = None
    prefs: str | None = None
    corpus: str | None = None  # documents for retrieval-augmented baselines (passages: k): a folder or a JSONL file
    format: str = "auto"  # auto | jsonl | csv | parquet
    columns: dict = field(default_factory=dict)  # ours → the user's column, e.g. {prompt: text, completion: label}
    prefs_columns: dict = field(default_factory=dict)  # the same for the preference file: {prompt, chosen, rejected}
    prompt_template: str | None = None  # e.g. "Classify the review: {prompt}"
    system_prompt: str | None = None
    # auto: 10% of train, 40 to 400 rows (bakeoff.data.splits.auto_val); < 1: a fraction; ≥ 1: a count
    val_size: float | str = "auto"
    test_size: float = 60
    metric: str = "exact_match"
    labels: list | str | None = None  # closed label set: a list, "auto" (the distinct train answers, any count) or a
    #                                   file with one label a line; None: the train answers when there are at most 50
    max_new_tokens: int | str = 48  # generation budget per answer, or "auto": the longest reference answer + 8
    seed: int = 0
    overlong: str = "truncate"  # rows longer than train_defaults.max_seq_len: truncate (counted) | drop
    duplicates: str = "drop"  # the same prompt and answer twice: drop (reported) | keep | error
    leakage: str = "drop"  # a test or val prompt also in train: drop it from train (reported) | keep | error


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 40
    effective_batch: int = 16
    micro_batch: int = 8
    lr: float = 1e-3
    lr_scheduler: str = "linear"
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_seq_len: int = 256
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    optimizer: str = "adamw_torch_fused"
    # auto | eager_fp32 | eager | sdpa | flash_attention_2 | flex_attention (bakeoff.train.kernels)
    attention: str = "auto"
    loss_logits: str = "auto"  # auto | labelled (head and loss at labelled tokens only) | all (the model's own)
    gradient_checkpointing: bool | str = "auto"  # auto: on for QLoRA (as PEFT prepares a k-bit model), off otherwise;
    # a variant's resolved value (true/false) is what it runs and records
    batching: str = "padded"  # one of config_arms.BATCHING: padded | group_by_length | padding_free | sequential
    memory_budget_gb: float | None = None  # stand-in for a card's memory: passing it ends the run as `oom`
    seed: int = 0
    seeds: int = 1  # train each variant this many times (seed, seed + 1, ...): mean, spread, intervals over both
    logging_steps: int = 5
    warmup_steps_excluded: int = 2  # steps left out of the steady-state speed
    checkpoint_steps: int = 0  # save a resumable checkpoint every N steps (0: none)
    eval_steps: int = 10  # validation loss every N steps, for early stopping and the convergence flag (0: never)
    # share of max_steps without a real improvement, then stop (bakeoff.train.stopping)
    early_stopping_patience: float = 0.3
    early_stopping_noise: float = 2.0  # a real improvement: the smoothed per-row drop beats this many standard errors
    improving_drop: float = 0.05  # "still improving": loss fell more than this share over the last quarter, val at best
    processes: int = 1  # training processes (DDP): torchrun on CPU, accelerate launch on GPUs
    accelerate_config: str | None = None  # accelerate config for several GPUs, e.g. configs/accelerate/fsdp.yaml

    @property
    def grad_accum(self) -> int:
        return self.effective_batch // (self.micro_batch * self.processes)

    def labelled_loss(self, sft: bool = True, plain_head: bool = True) -> bool:
        """Whether the loss runs the output head at labelled tokens alone (``loss_logits`` auto or labelled): SFT in one
        process on a model whose logits are its plain head over the last hidden state (``bakeoff.train.kernels``
        applies it; ``bakeoff.decide.memory`` counts the logits it holds)."""
        return self.loss_logits in ("auto", "labelled") and sft and self.processes == 1 and plain_head


@dataclass(frozen=True)
class EvalConfig:
    dtype: str = "auto"  # serving dtype of every run: auto (what precision: auto picks here) | fp32 | bf16 | fp16
    batch_size: int = 16
    max_examples: int | None = None  # cap the test split (None: all of it)
    latency_requests: int = 16  # requests timed one at a time for latency p50/p95 (0: none)
    lm_eval: object = "reuse"  # lm-eval on the test split: reuse (our answers) | generate | off (true/false too)
    lm_eval_tasks: list = field(default_factory=lambda: ["arc_easy"])  # standard lm-eval tasks (forgetting check)
    lm_eval_limit: int | None = 100  # examples per standard task (None: all)
    probe: bool = True  # the offline forgetting check on every run: general-ability probe (lm-eval) and KL to base
    probe_limit: int | None = None  # probe questions (None: all 200)
    bootstrap_resamples: int = 2000


@dataclass(frozen=True)
class BaselineConfig:
    name: str
    shots: int = 0
    selection: str = "fixed"  # fixed: the same k shots for every item | nearest: the k most similar (TF-IDF) |
    #                           nearest_dense: by embeddings (retrieval.embedder) | hybrid: BM25 and embeddings
    instruction: str | None = None  # a system prompt for this baseline only (after task.system_prompt)
    passages: int = 0  # k > 0: the k passages of task.corpus most relevant to each item, before its question (RAG)
    chunk_words: int = 120  # a passage's length in words (task.corpus cut at paragraphs)
    search: dict | None = None  # with tune.trials > 0: {shots: [...], selection: [...], instruction: [...]} tried
    #                             on the validation split; the best point is what this baseline reports on test
    endpoint: dict | None = None  # {base_url, model, api_key_env, concurrency, timeout_s, max_retries}: an
    # OpenAI-compatible server answers instead of the local base (bakeoff.evaluate.endpoint)
    price: dict | None = None  # {usd_per_1m_input, usd_per_1m_output}: the endpoint's prices per million tokens


@dataclass(frozen=True)
class RetrievalConfig:
    embedder: str = "all-minilm-l6-v2"  # nearest_dense and hybrid shots: a built-in alias, a local folder or a hub id


@dataclass(frozen=True)
class VariantConfig:
    name: str
    technique: str
    train: TrainConfig
    backend: str = "hf"
    options: dict = field(default_factory=dict)  # technique-specific, validated by the technique
    parent: str | None = None  # for `derived:` variants: the variant whose output this one starts from
    passages: int = 0  # k > 0: asked with the k passages of task.corpus most relevant to each item (bakeoff.data.raft)
    chunk_words: int = 120  # a passage's length in words
    raft: float | None = None  # None: trained on plain prompts (retrieval at test time only); p: RAFT's rows, the
    #                            gold passage among distractors in a share p of them

    def __post_init__(self):  # gradient_checkpointing auto: the technique's (on for QLoRA: its point is memory)
        if self.train.gradient_checkpointing == "auto":
            on = self.technique in FACTS and FACTS[self.technique].checkpointing
            object.__setattr__(self, "train", replace(self.train, gradient_checkpointing=on))


@dataclass(frozen=True)
class TrackingConfig:
    uri: str | None = None  # None: the sqlite store at the repo root; MLFLOW_TRACKING_URI wins
    experiment: str | None = None  # None: the task's name


@dataclass(frozen=True)
class VerdictConfig:
    min_gain: float = 0.05  # the smallest gain in the primary metric worth fine-tuning for (0.05 = 5 points)
    max_loss: float = 0.02  # the largest shortfall from the best a cheaper run may be shown within to replace it
    quick_look: bool = False  # set by `make quick` (bakeoff.run.quick): the report and MLflow say it is a quick look
    quick_look_changes: list = field(default_factory=list)  # set by `make quick`: what it changed, said in the report


@dataclass(frozen=True)
class CostConfig:
    usd_per_1k_prompt_tokens: float = 0.0  # what a prompt token costs you to serve (your price, per 1,000)
    train_tokens: float | None = None  # tokens of a real training run (None: what this run's variant saw)
    serve_gpu: str | None = None  # the card serving the fine-tuned target (None: the cheapest per hour that holds it)


@dataclass(frozen=True)
class ExportConfig:
    variants: list | None = None  # null: the recommended variant (none when prompting is recommended)
    gguf: str | None = "f16"  # f16 | q8_0 | bf16: llama.cpp's converter's --outtype; null: no GGUF (nor serving)
    serve: bool = True  # serve the GGUF with llama.cpp's server and re-score it on the test split
    concurrency: int = 4  # requests in flight for the serving figure beside batch 1


CURVE_ROLES = ("recommended", "best_prompt")  # curve arms resolved after the runs (bakeoff.decide.decision.curve_arm)


@dataclass(frozen=True)
class CurveConfig:
    arms: list = field(default_factory=lambda: list(CURVE_ROLES))  # roles, or variant and baseline names
    fractions: list = field(default_factory=lambda: [0.125, 0.25, 0.5])  # shares of train; 1.0 is the arm's own run
    schedule: str = "epochs"  # epochs: the arm's own run's epochs (a floor below) | steps: the arm's own steps
    min_steps: int = 20  # with schedule epochs: the floor of optimizer steps at a small share
    resamples: int = 1000  # bootstrap resamples over test items for the fit's intervals


@dataclass(frozen=True)
class SizingConfig:
    target: str | None = None  # the model you will really fine-tune: one of targets (None: the first)
    targets: list = field(default_factory=list)  # [{name, layers, hidden, intermediate, heads, kv_heads, vocab, tied}]
    gpus: list = field(default_factory=list)  # [{name, memory_gb, usd_per_hour, bf16_tflops}]
    margin: float = 0.1  # share of a card's memory kept free
    # model FLOP utilisation for time estimates, one figure or one per technique (full, lora, qlora, dpo, default;
    # dpo takes lora's unless named): measure yours with benchmarks/gpu_check.py
    mfu: float | dict = field(default_factory=lambda: {t: f.mfu for t, f in FACTS.items() if f.mfu is not None})
    mfu_low: float | dict | None = None  # the pessimistic end of the time and cost ranges (None: half of mfu)
    # gpu_check: each technique's utilisation from the GPU check's row nearest the target in size (reports/bench/
    # gpu.json), sizing.mfu where none was measured (DPO, a missing record), labelled assumed; params: sizing.mfu
    mfu_from: str = "gpu_check"
    target_seq_len: int | None = 1024  # tokens per row on the target card (None: the variant's max_seq_len)
    target_micro_batch: int | None = 1  # rows per forward pass on the target card (None: the variant's)
    cuda_overhead_gb: float = 1.29  # CUDA context and library workspaces, per process (measured on an H200)

    def mfu_for(self, technique: str) -> float:
        """The utilisation a ``technique``'s time estimate divides by (``sizing.mfu``)."""
        return per_technique(self.mfu, technique)

    def mfu_low_for(self, technique: str) -> float:
        """The pessimistic end for ``technique`` (``sizing.mfu_low``; unset: half of its ``mfu_for``)."""
        return self.mfu_for(technique) / 2 if self.mfu_low is None else per_technique(self.mfu_low, technique)


def per_technique(m, technique: str) -> float:
    """``m`` (a number, or technique → number with an optional ``default``) for ``technique``; a technique ``like``
    another (DPO, a LoRA adapter trained on pairs) takes its figure unless it has its own."""
    if not isinstance(m, dict):
        return float(m)
    for k in (technique, FACTS[technique].like if technique in FACTS else None, "default"):
        if k in m:
            return float(m[k])
    raise KeyError(f"sizing: no MFU for {technique} (name it, or a default)")


@dataclass(frozen=True)
class Params:
    model: ModelConfig
    task: TaskConfig
    train_defaults: TrainConfig
    eval: EvalConfig
    baselines: dict[str, BaselineConfig]
    variants: dict[str, VariantConfig]
    tracking: TrackingConfig
    verdict: VerdictConfig = VerdictConfig()
    cost: CostConfig = CostConfig()
    sizing: SizingConfig = SizingConfig()
    tune: TuneConfig = field(default_factory=TuneConfig)
    export: ExportConfig = ExportConfig()
    curve: CurveConfig | None = CurveConfig()  # None: no data-value curve
    retrieval: RetrievalConfig = RetrievalConfig()
    path: str = "params.yaml"

    def variant(self, name: str) -> VariantConfig:
        if name not in self.variants:
            raise ParamsError(f"{self.path}: variants.{name}: no such variant" + suggest(name, list(self.variants)))
        return self.variants[name]

    def baseline(self, name: str) -> BaselineConfig:
        if name not in self.baselines:
            raise ParamsError(f"{self.path}: baselines.{name}: no such baseline" + suggest(name, list(self.baselines)))
        return self.baselines[name]
