"""A stdout whose reader went away (`srpo-dsl --help | head -1`): the command ends quietly, exit 141.

How: the way of Python's documentation ("Note on SIGPIPE", the signal module): a write to the closed
pipe raises BrokenPipeError; `main` then puts the null device over file descriptor 1 (so Python's own
flush at exit has somewhere to go) and exits with 128 + SIGPIPE, what a shell reports for `yes | head`.
Not the other way, SIGPIPE back to SIG_DFL at start: that signal also ends a process that writes to a
socket whose peer has gone (a model server, a retrieval server, the gloo and Ray connections of a
training run), which must stay errors the command reports; and a `train` killed by it while saving
would leave a checkpoint half written, where an exception unwinds through the checkpoint's cleanup
(`checkpoint.removed_on_failure`) and the run's log (`RunLog.fail`). A training run's own stdout is
its report, written once its checkpoints are saved, so a closed stdout loses none of them. `srpo-dsl
lsp` answers its client on stdout: a client that closed it has gone, what the server still had to
say goes nowhere (`lsp.client_output`), and the server ends when its stdin closes.

typer (click) and rich catch the BrokenPipeError first and raise SystemExit(1) in its place (rich
after putting the null device over stdout itself, `RICH_HOOK`): that exit, raised while the error is
handled, counts as the closed pipe too. A broken pipe to another process is none of this: stdout is
still open then, and the error is reported as before.
"""

from __future__ import annotations

import os
import select
import sys
import traceback

EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE (13)
RICH_HOOK = "on_broken_pipe"  # rich.console.Console's: the null device over stdout, then SystemExit(1)


def stdout_closed(exc: BaseException) -> bool:
    """Whether `exc` is a write to a stdout whose reader went away: a BrokenPipeError, or the SystemExit
    raised in its place; not one of a pipe to another process (stdout is still open then)."""
    broken = exc if isinstance(exc, BrokenPipeError) else exc.__context__
    return isinstance(broken, BrokenPipeError) and (reader_gone() or raised_in(exc, RICH_HOOK))


def reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose other end is closed (poll reports an error on it)."""
    if not hasattr(select, "poll"):  # Windows: no poll; there a broken pipe is stdout's
        return True
    poller = select.poll()
    poller.register(1, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def raised_in(exc: BaseException, function: str) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].name == function


def end_quietly() -> int:
    """The null device over stdout (what is still buffered goes there at exit); the exit code to end with."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    return EXIT_PIPE_CLOSED


def flushed() -> bool:
    """Write out what stdout still buffers, while a closed pipe can be told: at exit, Python's own flush
    would print "Exception ignored ... BrokenPipeError" and exit 120. False when its reader went away;
    True when there is nothing to flush (the language server closes stdout when its client says `exit`)."""
    try:
        if sys.stdout is not None and not sys.stdout.closed:
            sys.stdout.flush()
    except BrokenPipeError:
        end_quietly()
        return False
    return True
