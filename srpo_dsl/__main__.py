"""`python -m srpo_dsl ...` (used under the `deepspeed`/`torchrun` launchers, and by `srpo-dsl train` to
start its own processes: those die with it, `srpo_dsl.launched`)."""

from srpo_dsl.launched import follow_launcher

follow_launcher()

from srpo_dsl.cli.main import main  # noqa: E402  (a launched process follows its launcher first)

main()
