"""Local task data normalised to `{id, question, answer, answers, ...}`: JSONL, JSON and Parquet files read
here, and through Hugging Face `datasets` (`envs.hf_data`) CSV and Arrow files, saved folders, `hf:NAME`.

Every record keeps its own fields and gains `id` (str), `question` (str), `answers` (the
accepted gold answers, strings) and `answer` (the first of them). Fields are detected:

| set | question | answers |
|---|---|---|
| DAPO-Math-17k (verl layout) | `prompt` (its answer-format wrapper removed) | `reward_model.ground_truth` |
| MATH500, AIME, AMC, Minerva | `problem` or `question` | `answer` (numbers as text; `142.0` -> `142`) |
| OlympiadBench | `question` | `final_answer` (a list) |
| Search-R1 (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, ...) | `question` | `golden_answers`, `answer` |
| Search-R1 parquet, no `question` | `prompt` (its instruction removed) | `reward_model.ground_truth` |

The first field present in `QUESTION_FIELDS` / `ANSWER_FIELDS` / `ID_FIELDS` wins; `fields=
{"question": ..., "answer": ..., "id": ...}` overrides any of them (dotted names reach into
nested records; names match case-insensitively, so AIME copies with `Problem` / `Answer`
columns load too). Without an id field the id is `<file stem>-<row>`. Ids group the rollouts
of one prompt, so they must be unique: a repeated id gets `@<row>` appended.

Kinds `math` and `qa` require a question and an answer in every record. The generic kinds
`jsonl` and `parquet` (a file of that suffix) and `dataset` (any source) require only the mapped fields
and add `question` / `answer` / `answers` where they are found, for rewards that read other fields.
`arith` generates additions (or reads a file as `math` does). Each kind's loader here is the
`make` of its entry in `srpo_dsl.lang.checks.schema.TASK_KINDS`:

    loader(options, split, data, limit) -> [row, ...]

`options` are the binding's (path options resolved), `split` is `train` or `eval`, `data` a
file read in place of the binding's own (`--data`, `--eval-data`), `limit` the most rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srpo_dsl.data_sources import OWN_FILES, cache_name, data_problem
from srpo_dsl.envs.arith import make_arith_tasks
from srpo_dsl.envs.hf_data import ONE_SPLIT, ArrowTasks, open_dataset
from srpo_dsl.envs.lines import LineIndex
from srpo_dsl.envs.task_table import JsonlTasks
from srpo_dsl.io import loads, not_utf8
from srpo_dsl.lang.checks.schema import TASK_KINDS
from srpo_dsl.limits import oversized_row

QUESTION_FIELDS = ("question", "problem", "prompt", "query")
ANSWER_FIELDS = (
    "golden_answers",
    "answers",
    "answer",
    "final_answer",
    "reward_model.ground_truth",
    "possible_answers",
    "target",
)
ID_FIELDS = ("id", "unique_id", "extra_info.index")
DETECTED = {"question": QUESTION_FIELDS, "answer": ANSWER_FIELDS, "id": ID_FIELDS}
Tasks = Sequence[dict]  # a list, or a .jsonl file's `JsonlTasks`

_shared: dict[tuple, Tasks] | None = None  # the reads made within `shared_reads`, by file and options


@contextmanager
def shared_reads() -> Iterator[None]:
    """Within it, reading a file that was already read (same file, fields, limit, kind strictness) gets
    the first read's result: a run's training and held-out rows come from one read of a shared file."""
    global _shared
    outer, _shared = _shared, {} if _shared is None else _shared
    try:
        yield
    finally:
        _shared = outer


# Prompt wrappers around the question: (how the wrapper starts, what precedes the question, its tail).
_WRAPPERS = (
    (  # DAPO-Math-17k: instruction, blank line, problem, blank line, reminder
        "Solve the following math problem step by step. The last line of your response should be of the form",
        "\n\n",
        'Remember to put your answer on its own line after "Answer:".',
    ),
    (  # Search-R1 (`make_prefix`): instruction ending "Question: ", the question, a newline
        "Answer the given question. You must conduct reasoning inside <think> and </think>",
        " Question: ",
        "",
    ),
)


def check_row_size(where: str, row: object, nbytes: int | None = None) -> None:
    """A row over the limit (`limits.oversized_row`) is refused (ValueError naming it): it would be copied
    into every prompt and trace of its episodes."""
    problem = oversized_row(row, nbytes)
    if problem:
        raise ValueError(f"{where}: {problem}")


def _jsonl(path: Path, limit: int | None) -> Iterator[tuple[str, dict]]:
    with path.open("rb") as f:
        count, offset = 0, 0
        for n, raw in enumerate(f, 1):
            if limit is not None and count >= limit:
                return
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{n}: {not_utf8(exc, offset)}") from None
            offset += len(raw)
            if line.strip():
                check_row_size(f"{path}:{n}", line, len(line.encode("utf-8")))
                try:
                    yield f"{path}:{n}", loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
                count += 1


def _records(path: Path, limit: int | None) -> Iterator[tuple[str, dict]]:
    """(where, record) pairs of a .jsonl, .json or .parquet file: `file:line` for JSONL, `file row N`
    otherwise."""
    if path.suffix == ".jsonl":
        yield from _jsonl(path, limit)
        return
    if path.suffix == ".json":
        try:
            rows = loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: {not_utf8(exc)}") from None
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
            yield from _jsonl(path, limit)  # JSON lines under a .json name
            return
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of records")
        rows = rows[:limit] if limit is not None else rows
    else:  # .parquet: `FileTasks._open` sends only `OWN_FILES` here
        rows = _parquet(path, limit)
    for i, row in enumerate(rows):
        check_row_size(f"{path} row {i}", row)
        yield f"{path} row {i}", row


def _parquet(path: Path, limit: int | None) -> list[dict]:
    """The first `limit` rows of a Parquet file, read with pyarrow (no `datasets` cache folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[dict] = []
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            rows += batch.to_pylist()
            if limit is not None and len(rows) >= limit:
                break
    except (pa.ArrowException, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: cannot read Parquet ({reason})") from None
    return rows[:limit] if limit is not None else rows


def _get(record: dict, dotted: str) -> object | None:
    """`record["a"]["b"]` for `a.b`, names matched case-insensitively when not exact; None if absent."""
    value: object = record
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        key = part if part in value else next((k for k in value if str(k).lower() == part.lower()), None)
        if key is None:
            return None
        value = value[key]
    return value


def _text(value: object) -> str:
    """A question: the last user turn of a chat, without a DAPO or Search-R1 prompt wrapper."""
    if isinstance(value, list):
        turns = [m for m in value if isinstance(m, dict) and "content" in m]
        users = [m for m in turns if m.get("role") == "user"] or turns
        value = users[-1]["content"] if users else ""
    text = str(value).strip()
    for head, before, tail in _WRAPPERS:
        if text.startswith(head) and before in text:
            text = text.split(before, 1)[1].strip().removesuffix(tail)
            break
    return text.strip()


def _answers(value: object) -> list[str]:
    """Gold answers from a string, a number, a list, or a dict (`target`, `value` + `aliases`)."""
    if isinstance(value, dict):
        nested = [value[k] for k in ("ground_truth", "target", "value", "text", "aliases") if k in value]
        return _dedupe([a for v in nested for a in _answers(v)])
    if isinstance(value, (list, tuple)):
        return _dedupe([a for v in value for a in _answers(v)])
    if isinstance(value, float) and value.is_integer():
        return [str(int(value))]
    text = "" if value is None or isinstance(value, bool) else str(value).strip()
    return [text] if text else []


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _first(record: dict, names: tuple[str, ...]) -> tuple[str | None, object | None]:
    for name in names:
        value = _get(record, name)
        if value is not None:
            return name, value
    return None, None


def _field(record: dict, key: str, fields: dict, where: str, required: bool) -> tuple[str | None, object]:
    """(name, value) of `key`: the mapped field, else the first detected one; ValueError if required."""
    names = (fields[key],) if fields.get(key) else DETECTED[key]
    name, value = _first(record, names)
    if name is None and (required or fields.get(key)):
        hint = "" if fields.get(key) else f'; map it with `{key} = "..."`'
        raise ValueError(
            f"{where}: no {key} field (looked for {', '.join(names)}; "
            f"record has {', '.join(map(str, record)) or 'no fields'}){hint}"
        )
    return name, value


def _gold(name: str | None, value: object, where: str) -> list[str]:
    if name == "possible_answers" and isinstance(value, str):  # PopQA: a JSON list as text
        try:
            value = loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: `possible_answers` is not a JSON list") from None
    return _answers(value) if name else []


def normalize_record(
    record: dict, row: int, where: str, stem: str, fields: dict | None = None, *, strict: bool = True
) -> dict:
    """`record` with `id` and, where found, `question`, `answer`, `answers`; ValueError naming `where`
    for a missing or empty required field (`strict`: question and answer; always: the mapped ones)."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    fields = fields or {}
    need = {key: strict or bool(fields.get(key)) for key in ("question", "answer")}
    qname, qvalue = _field(record, "question", fields, where, need["question"])
    aname, avalue = _field(record, "answer", fields, where, need["answer"])
    question = _text(qvalue) if qname else ""
    answers = _gold(aname, avalue, where)
    for key, name, got in (("question", qname, question), ("answer", aname, answers)):
        if need[key] and not got:
            raise ValueError(f"{where}: empty {key} (field `{name}`)")
    idname, rid = _field(record, "id", fields, where, False)
    task = {**record, "id": str(rid) if idname else f"{stem}-{row}"}
    if question:
        task["question"] = question
    if answers:
        task["answer"], task["answers"] = answers[0], answers
    return task


@dataclass(frozen=True)
class FileTasks:
    """The loader of a task kind read from a local file.

    `strict`: every record needs a question and an answer. The kinds of `data_sources.ONE_FILE_TYPE`
    read only that file type; the others every source `data_sources` accepts.
    """

    kind: str
    strict: bool = True

    def read(
        self, path: Path | None, fields: dict | None = None, limit: int | None = None, split: str = ONE_SPLIT
    ) -> Tasks:
        """Tasks from `path`: a .jsonl file's as a `JsonlTasks` (rows parsed when asked for), a .json or
        .parquet file's as a list, another source's (`srpo_dsl.data_sources`) as `ArrowTasks` (rows read
        from `datasets`' memory map when asked for; `split` of a DatasetDict folder or a `hf:` name).
        Raises FileNotFoundError or ValueError with a one-line message. Within `shared_reads` a second
        read of the same source gets the first one's result."""
        unknown = sorted(set(fields or {}) - set(DETECTED))
        if unknown:
            raise ValueError(f"unknown field mapping {', '.join(unknown)} (known: {', '.join(DETECTED)})")
        if path is None:
            raise ValueError(f"a `{self.kind}` task needs a data file")
        path = Path(path)
        problem = data_problem(path, self.kind)
        if problem is not None:
            raise ValueError(problem)
        if cache_name(path) is None and not path.exists():
            raise FileNotFoundError(f"cannot read {path}: no such file")
        key = (str(path.resolve()), tuple(sorted((fields or {}).items())), limit, self.strict, split)
        if _shared is not None and key in _shared:
            return _shared[key]
        tasks = self._open(path, fields, limit, split)
        if not tasks:
            raise ValueError(f"{path}: no records")
        if _shared is not None:
            _shared[key] = tasks
        return tasks

    def _open(self, path: Path, fields: dict | None, limit: int | None, split: str) -> Tasks:
        if path.suffix == ".jsonl" and path.is_file():
            return self._lazy(path, fields, limit)
        if path.suffix in OWN_FILES and path.is_file():
            return self._eager(path, fields, limit)
        table, label = open_dataset(path, split)
        stem = cache_name(path) or path.stem

        def normalize(record: object, row: int, where: str) -> dict:
            return normalize_record(record, row, where, stem.replace("/", "-"), fields, strict=self.strict)  # type: ignore[arg-type]

        return ArrowTasks(table, label, normalize, check_row_size, limit)

    def _lazy(self, path: Path, fields: dict | None, limit: int | None) -> JsonlTasks:
        def normalize(record: object, row: int, where: str) -> dict:
            return normalize_record(record, row, where, path.stem, fields, strict=self.strict)  # type: ignore[arg-type]

        return JsonlTasks(LineIndex.scan(path, limit), normalize, check_row_size)

    def _eager(self, path: Path, fields: dict | None, limit: int | None) -> list[dict]:
        tasks, seen = [], set()
        for i, (where, record) in enumerate(_records(path, limit)):
            task = normalize_record(record, i, where, path.stem, fields, strict=self.strict)
            if task["id"] in seen:  # merged sets (Search-R1's NQ + HotpotQA) repeat per-set ids
                task["id"] = f"{task['id']}@{i}"
            seen.add(task["id"])
            tasks.append(task)
        return tasks

    def __call__(self, options: Mapping[str, Any], split: str, data: Path | None, limit: int | None) -> Tasks:
        """The binding's tasks of `split`: `data`, else its `eval_data` (eval, when given) or `data`; of a
        DatasetDict folder or a `hf:` name, the binding's `eval_split` (eval) or `split`."""
        heldout = split == "eval" and bool(options.get("eval_data"))
        own = options["eval_data"] if heldout else options["data"]
        part = (split == "eval" and options.get("eval_split")) or options.get("split") or ONE_SPLIT
        fields = {k: options[k] for k in DETECTED if options.get(k)} or None
        return self.read(Path(data or own), fields, limit or options.get("limit"), part)


@dataclass(frozen=True)
class Arithmetic(FileTasks):
    """`arith`: additions generated from its options (held-out pairs for `eval`), or read from a file."""

    def read(self, path: Path | None, fields: dict | None = None, limit: int | None = None) -> Tasks:
        return make_arith_tasks(limit or 1000) if path is None else super().read(path, fields, limit)

    def __call__(self, options: Mapping[str, Any], split: str, data: Path | None, limit: int | None) -> Tasks:
        if data is not None:
            return self.read(Path(data), None, limit)
        heldout = split == "eval"
        n = options["eval_n"] if heldout else options["n"]
        rows = make_arith_tasks(
            n, options["seed"], options["max_operand"], heldout=heldout, mix=options["mix"]
        )
        return rows[:limit] if limit else rows


MATH, QA = FileTasks("math"), FileTasks("qa")
JSONL = FileTasks("jsonl", strict=False)
PARQUET = FileTasks("parquet", strict=False)
DATASET = FileTasks("dataset", strict=False)
ARITH = Arithmetic("arith")


def open_tasks(
    path: Path | None, *, kind: str, fields: dict | None = None, limit: int | None = None
) -> Tasks:
    """Tasks of the task kind `kind` (`TASK_KINDS`) from a local file, as its loader reads them (a .jsonl
    file's rows parsed when asked for); `arith` without a file generates `limit` (default 1000)
    additions. `fields` maps `question`, `answer`, `id` to field names. Raises FileNotFoundError or
    ValueError with a one-line message."""
    loader = TASK_KINDS.lookup(kind).maker
    if not isinstance(loader, FileTasks):
        raise ValueError(f"a `{kind}` task is not read from a file")
    return loader.read(path, fields, limit)


def load_tasks(
    path: Path | None, *, kind: str, fields: dict | None = None, limit: int | None = None
) -> list[dict]:
    """`open_tasks`' rows, every one read now: a bad row anywhere in the file is its ValueError."""
    return list(open_tasks(path, kind=kind, fields=fields, limit=limit))
