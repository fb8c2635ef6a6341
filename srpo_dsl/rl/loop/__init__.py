"""The training run: its plan, built once where it starts (`plan`), the run made ready from it
(`prepare`), the loop (`trainer`), one update (`update`), held-out evaluation (`heldout`), per-role
metrics (`role_metrics`), the run's folder written (`runlog`; its format: `srpo_dsl.runfolder`) with
what an update did to each event (`event_updates`), checkpoints (`checkpoint`) and their export as
Hugging Face models (`export`), and bitwise-reproducible kernels on CPU (`determinism`).

The top of `rl`: it may import every other part of it.
"""
