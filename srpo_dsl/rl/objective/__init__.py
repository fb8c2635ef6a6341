"""The objective: SRPO's setwise terms (`setwise`), the policy losses and their registry (`losses`),
advantages (`advantages`), aggregation modes (`aggregation`), episodes -> training rows (`rows`),
event-atomic batching (`batching`), and the user's Python for any of these parts (`plugins`).

Pure math over tensors and episodes (docs/objective.md): it may import `srpo_dsl.registries`, `lang`
and `runtime`, never another part of `rl`.
"""
