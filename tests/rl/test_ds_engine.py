"""`srpo_dsl.rl.engines.ds_engine.TrainEngine` against a real DeepSpeed engine, built on CPU as the training
tests build theirs (mypy checks the members' signatures: `_deepspeed_engine_is_a_train_engine`)."""

from __future__ import annotations

import inspect

from tests.support.training import build, one_thread  # noqa: F401  (`one_thread`: the autouse fixture)


def protocol_members(protocol: type) -> set[str]:
    """The attributes (annotated) and methods a Protocol class names itself."""
    methods = {name for name, value in vars(protocol).items() if inspect.isfunction(value)}
    return (set(protocol.__annotations__) | methods) - {"__init__", "_no_init_or_replace_init"}


def test_a_deepspeed_engine_has_every_member_train_engine_names(models, dist):
    from deepspeed.runtime.engine import DeepSpeedEngine

    from srpo_dsl.rl.engines.ds_engine import TrainEngine

    policies, _ = build({"a": models[0]}, dist)
    engine = policies["a"].engine
    assert isinstance(engine, DeepSpeedEngine)
    members = protocol_members(TrainEngine)
    assert {"module", "backward", "step", "save_checkpoint", "load_checkpoint"} <= members
    assert sorted(name for name in members if not hasattr(engine, name)) == []
    for name in members - set(TrainEngine.__annotations__):
        assert callable(getattr(engine, name)), name
    assert policies["a"].model is engine and policies["a"].trained_engine is engine
