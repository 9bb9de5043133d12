"""Rebuilds the built-in tokenizer (agentic_jax/data/assets/) from the curriculum.

    python tools/build_tokenizer.py [--out DIR] [--vocab_size 1024] [--seed 0]

Deterministic: running it again reproduces the committed files.
"""

from __future__ import annotations

import argparse
import logging

from agentic_jax.data import tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(tokenizer.ASSET_DIR), help="output directory")
    parser.add_argument("--vocab_size", type=int, default=tokenizer.DEFAULT_VOCAB_SIZE)
    parser.add_argument("--seed", type=int, default=0, help="curriculum seed of the corpus")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.info("building the corpus from the curriculum (seed %d)", args.seed)
    texts = tokenizer.tokenizer_corpus(args.seed)
    logging.info("training a byte-level BPE on %d texts", len(texts))
    trained = tokenizer.train_tokenizer(texts, args.vocab_size, args.out)
    logging.info("wrote %s (%d tokens)", args.out, len(trained))


if __name__ == "__main__":
    main()
