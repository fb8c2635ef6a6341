"""`python -m srpo_dsl ...` (used under the `deepspeed`/`torchrun` launchers, and by `srpo-dsl train` to
start its own processes: those die with it, `srpo_dsl.launched`)."""

import sys

from srpo_dsl.launched import follow_launcher

follow_launcher()

try:
    from srpo_dsl.cli.main import main  # (a launched process follows its launcher first)
except KeyboardInterrupt:  # a Ctrl-C while the command line loads (a launcher forwards one at once)
    sys.stderr.write("interrupted\n")
    sys.exit(130)

main()
