"""Models as training engines: each policy's module, rollout engine and DeepSpeed engine (`policies`),
LoRA adapters on a shared base (`adapters`), the DeepSpeed config and step (`ds_engine`), whether the
policies fit a GPU (`fit`), and weights from a trained module to its rollout engine (`weight_sync`).

It may import `rl.distributed` (and `backends`, `lang`, `models`), never `rl.transport` or `rl.loop`.
"""
