"""Local task files (JSONL, JSON, Parquet) normalised to `{id, question, answer, answers, ...}`.

Every record keeps its own fields and gains `id` (str), `question` (str), `answers` (the
accepted gold answers, strings) and `answer` (the first of them). Fields are detected:

| set | question | answers |
|---|---|---|
| DAPO-Math-17k (verl layout) | `prompt` (its answer-format wrapper removed) | `reward_model.ground_truth` |
| MATH500, AIME, AMC, Minerva | `problem` or `question` | `answer` (numbers as text; `142.0` -> `142`) |
| OlympiadBench | `question` | `final_answer` (a list) |
| Search-R1 (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, ...) | `question` | `golden_answers`, `answer` |

The first field present in `QUESTION_FIELDS` / `ANSWER_FIELDS` wins; `fields={"question":
..., "answer": ...}` overrides either (dotted names reach into nested records; names match
case-insensitively, so AIME copies with `Problem` / `Answer` columns load too). The id is
`id`, `unique_id` or `extra_info.index`, else `<file stem>-<row>`. Ids group the rollouts
of one prompt, so they must be unique: a repeated id gets `@<row>` appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from srpo_dsl.envs.arith import make_arith_tasks

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
TASK_KINDS = ("math", "qa", "arith")

_DAPO_HEAD = (
    "Solve the following math problem step by step. The last line of your response should be of the form"
)
_DAPO_TAIL = 'Remember to put your answer on its own line after "Answer:".'


def _jsonl(path: Path, limit: int | None) -> Iterator[tuple[str, dict]]:
    with path.open(encoding="utf-8") as f:
        count = 0
        for n, line in enumerate(f, 1):
            if limit is not None and count >= limit:
                return
            if line.strip():
                try:
                    yield f"{path}:{n}", json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
                count += 1


def _records(path: Path, limit: int | None) -> Iterator[tuple[str, dict]]:
    """(where, record) pairs: `file:line` for JSONL, `file row N` otherwise."""
    if path.suffix == ".jsonl":
        yield from _jsonl(path, limit)
        return
    if path.suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
            yield from _jsonl(path, limit)  # JSON lines under a .json name
            return
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of records")
        rows = rows[:limit] if limit is not None else rows
    elif path.suffix == ".parquet":
        rows = _parquet(path, limit)
    else:
        raise ValueError(
            f"{path}: unsupported task file type {path.suffix!r} (use .jsonl, .json or .parquet)"
        )
    for i, row in enumerate(rows):
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
    """A question: the last user turn of a chat, without the DAPO answer-format wrapper."""
    if isinstance(value, list):
        turns = [m for m in value if isinstance(m, dict) and "content" in m]
        users = [m for m in turns if m.get("role") == "user"] or turns
        value = users[-1]["content"] if users else ""
    text = str(value).strip()
    if text.startswith(_DAPO_HEAD) and "\n\n" in text:
        text = text.split("\n\n", 1)[1].removesuffix(_DAPO_TAIL)
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


def normalize_record(record: dict, row: int, where: str, stem: str, fields: dict | None = None) -> dict:
    """`record` with `id`, `question`, `answer`, `answers` set; ValueError naming `where` if it cannot be."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    fields = fields or {}
    found = {}
    for key, names in (("question", QUESTION_FIELDS), ("answer", ANSWER_FIELDS)):
        wanted = (fields[key],) if fields.get(key) else names
        name, value = _first(record, wanted)
        if name is None:
            raise ValueError(
                f"{where}: no {key} field (looked for {', '.join(wanted)}; "
                f'record has {", ".join(record) or "no fields"}); map it with `{key} = "..."`'
            )
        found[key] = (name, value)
    question = _text(found["question"][1])
    name, value = found["answer"]
    if name == "possible_answers" and isinstance(value, str):  # PopQA: a JSON list as text
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: `possible_answers` is not a JSON list") from None
    answers = _answers(value)
    if not question or not answers:
        empty = "question" if not question else "answer"
        raise ValueError(f"{where}: empty {empty} (field `{found[empty][0]}`)")
    _, rid = _first(record, ID_FIELDS)
    return {
        **record,
        "id": str(rid) if rid is not None else f"{stem}-{row}",
        "question": question,
        "answer": answers[0],
        "answers": answers,
    }


def load_tasks(
    path: Path | None, *, kind: str, fields: dict | None = None, limit: int | None = None
) -> list[dict]:
    """Tasks of `kind` (math, qa, arith) from a local file; `arith` without a file generates
    `limit` (default 1000) additions. Raises FileNotFoundError or ValueError with a one-line message."""
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task kind {kind!r} (known: {', '.join(TASK_KINDS)})")
    if path is None:
        if kind != "arith":
            raise ValueError(f"a `{kind}` task needs a data file")
        return make_arith_tasks(limit or 1000)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cannot read {path}: no such file")
    tasks, seen = [], set()
    for i, (where, record) in enumerate(_records(path, limit)):
        task = normalize_record(record, i, where, path.stem, fields)
        if task["id"] in seen:  # merged sets (Search-R1's NQ + HotpotQA) repeat per-set ids
            task["id"] = f"{task['id']}@{i}"
        seen.add(task["id"])
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{path}: no records")
    return tasks
