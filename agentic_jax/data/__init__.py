"""Math data: the curriculum, dataset sources, prompt templates and the tokenizer.

Importing this package is light: tensorflow-datasets and transformers load only when a
source or tokenizer function that needs them is called.
"""

from agentic_jax.data.curriculum import DEFAULT_SIZES, generate_curriculum, kinds
from agentic_jax.data.problem import STAGES, Problem
from agentic_jax.data.prompts import (
    CODE_CLOSE,
    CODE_OPEN,
    OUTPUT_CLOSE,
    OUTPUT_OPEN,
    code_block,
    direct_solution_text,
    final_answer,
    format_prompt,
    format_tool_output,
    tool_solution_text,
)
from agentic_jax.data.scheduler import CurriculumScheduler, SchedulerConfig
from agentic_jax.data.sources import SourceStats, load_source
from agentic_jax.data.split import deduplicate, near_duplicate_key, split_problems
from agentic_jax.data.tokenizer import builtin_tokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "CODE_CLOSE",
    "CODE_OPEN",
    "DEFAULT_SIZES",
    "OUTPUT_CLOSE",
    "OUTPUT_OPEN",
    "STAGES",
    "CurriculumScheduler",
    "Problem",
    "SchedulerConfig",
    "SourceStats",
    "builtin_tokenizer",
    "code_block",
    "deduplicate",
    "direct_solution_text",
    "final_answer",
    "format_prompt",
    "format_tool_output",
    "generate_curriculum",
    "kinds",
    "load_source",
    "load_tokenizer",
    "near_duplicate_key",
    "split_problems",
    "tool_solution_text",
    "train_tokenizer",
]
