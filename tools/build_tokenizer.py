"""Builds the built-in tokenizer's byte-level BPE from the curriculum.

    python tools/build_tokenizer.py --out DIR [--vocab_size 1024] [--seed 0]
    python tools/build_tokenizer.py --replace_builtin     # over agentic_jax/data/assets/

Deterministic: the same curriculum gives the same files. The committed asset is frozen: the
built-in models' token ids, their checkpoints and the shipped warm-start results
(training/assets/warmstart) depend on it. It was built from an earlier curriculum; a build from
today's splits every curriculum text into the same tokens but breaks some ties between equally
frequent merges otherwise (15 of the 843 tokens of its BPE vocabulary differ), so replacing it
means retraining those results (`--replace_builtin`).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from agentic_jax.data import tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="output directory (not the committed asset's)")
    where.add_argument("--replace_builtin", action="store_true",
                       help="write over the committed asset (changes the built-in ids)")
    parser.add_argument("--vocab_size", type=int, default=tokenizer.DEFAULT_VOCAB_SIZE)
    parser.add_argument("--seed", type=int, default=0, help="curriculum seed of the corpus")
    args = parser.parse_args(argv)
    if args.out and Path(args.out).resolve() == tokenizer.ASSET_DIR.resolve():
        parser.error(f"--out {args.out} is the committed asset: pass --replace_builtin instead")
    args.out = args.out or str(tokenizer.ASSET_DIR)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.info("building the corpus from the curriculum (seed %d)", args.seed)
    texts = tokenizer.tokenizer_corpus(args.seed)
    logging.info("training a byte-level BPE on %d texts", len(texts))
    trained = tokenizer.train_tokenizer(texts, args.vocab_size, args.out)
    logging.info("wrote %s (%d tokens)", args.out, len(trained))


if __name__ == "__main__":
    main()
