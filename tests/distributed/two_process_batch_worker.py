"""One of two processes building one update batch from rollouts whose filters keep a different
number of rows on each host; prints JSON.

Run as `python two_process_batch_worker.py COORDINATOR_ADDRESS PROCESS_ID`; each process has two
CPU devices. Process 0 keeps 2 of its 4 episodes (one group has equal rewards), process 1 all 4.
"""

import json
import sys

import numpy as np

from agentic_jax.parallel import batch_sharding, initialize_distributed, make_mesh


def main(coordinator_address: str, process_id: int) -> None:
    initialize_distributed(coordinator_address, 2, process_id, initialization_timeout_s=60)
    import jax
    from flax import nnx

    from agentic_jax.models import get_preset
    from agentic_jax.parallel import create_sharded_model
    from agentic_jax.rl.experience import ExperienceConfig, make_train_batch
    from agentic_jax.rl.filters import FilterConfig
    from agentic_jax.rollout import Episode, RolloutBatch

    mesh = make_mesh(1, -1, 1)
    cfg = get_preset("tiny-0.2m", vocab_size=64, value_head=True)
    model = create_sharded_model(cfg, mesh, seed=0)
    graphdef, state = nnx.split(model)

    rng = np.random.default_rng(process_id)
    episodes = []
    for n in (6, 9, 12, 20 + 4 * process_id):
        ep = Episode(prompt_tokens=list(rng.integers(1, 60, 4)))
        ep.add_model_tokens(rng.integers(1, 60, n), [-1.0] * n, [0.0] * n)
        episodes.append(ep)
    rewards = [1.0, 1.0, 0.0, 1.0] if process_id == 0 else [1.0, 0.0, 1.0, 0.0]
    group_ids = [2 * process_id, 2 * process_id, 2 * process_id + 1, 2 * process_id + 1]
    for ep, reward, group in zip(episodes, rewards, group_ids):
        ep.reward, ep.group_id = reward, group
    rollout = RolloutBatch.from_episodes(episodes, length=64, pad_id=0)
    exp_cfg = ExperienceConfig(estimator="grpo",
                               filters=FilterConfig(drop_uniform_groups=True), row_multiple=1)
    batch, stats = make_train_batch(rollout, exp_cfg, graphdef=graphdef, state=state,
                                    batch_sharding=batch_sharding(mesh, 2))
    replicated = jax.NamedSharding(mesh, jax.P())
    per_row = jax.jit(lambda b: (b.loss_mask.sum(axis=1), (b.advantages * b.loss_mask).sum()),
                      out_shardings=replicated)
    mask_per_row, adv_sum = per_row(batch)
    print(json.dumps({
        "shape": list(batch.tokens.shape),
        "kept_frac": stats["kept_frac"],
        "mask_per_row": np.asarray(mask_per_row).tolist(),
        "adv_sum": float(adv_sum),
    }), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
