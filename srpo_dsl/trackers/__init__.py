"""Experiment trackers a training run reports to (`train with (report_to = ...)`; docs/training.md,
"Trackers"): one interface (`base.Tracker`), a module per tracker, imported only when a run names it
(the registry `srpo_dsl.registries.TRACKERS`), and the fan-out that keeps a failing one from stopping
the run (`fanout.Trackers`)."""
