"""Asynchronous rollouts: the trainer ranks and the rollout workers of one launch (`link`), the
trainer's side (`feed`: batches in, orders and weights out), a worker's side (`worker`, its control
thread `inbox`), which worker generates which step (`schedule`), new weights to the workers
(`remote_weights`) and how stale an episode's weights may be (`staleness`). docs/training.md, "Async".

It may import `rl.distributed` and `rl.engines`, never `rl.loop`.
"""
