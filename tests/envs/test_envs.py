"""Environments: answer normalisation, math equivalence (on the real MATH500/AIME files),
the arithmetic task, rewards, retrievers (BM25 and a real loopback HTTP server), loaders."""

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from srpo_dsl.envs.answers import exact_match, f1, normalize_answer
from srpo_dsl.envs.arith import is_heldout, make_arith_tasks
from srpo_dsl.envs.data import load_tasks
from srpo_dsl.envs.math import math_equiv
from srpo_dsl.envs.retrieval import Bm25Retriever, Document, HttpRetriever, RetrieverError, make_retriever
from srpo_dsl.envs.rewards import REWARDS
from srpo_dsl.runtime.parsers import last_boxed
from tests.support.retrieval_server import RetrievalServer

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
SHARED_MATH = ROOT.parent / "shared" / "data" / "math"
WIKI = DATA / "wiki_sample.jsonl"


# ---- answers ------------------------------------------------------------------------------
def test_normalize_answer():
    assert normalize_answer("  The  Eiffel Tower! ") == "eiffel tower"
    assert normalize_answer("An apple, a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words


def test_exact_match_and_f1_hand_values():
    assert exact_match("the Jane Austen.", ["Jane Austen"]) == 1.0
    assert exact_match("Austen", ["Jane Austen", "J. Austen"]) == 0.0
    assert exact_match("Paris", "paris") == 1.0
    assert exact_match(None, ["x"]) == 0.0
    assert f1("Jane Austen", ["Jane Austen"]) == 1.0
    assert f1("Austen", ["Jane Austen"]) == pytest.approx(2 / 3)  # p=1, r=1/2
    assert f1("the author Jane", ["Jane Austen", "Austen"]) == pytest.approx(0.5)  # p=1/2, r=1/2
    assert f1("Mars", ["Venus"]) == 0.0
    assert f1(None, ["x"]) == 0.0
    assert f1("the", ["a"]) == 0.0  # both empty after normalisation


# ---- arithmetic task --------------------------------------------------------------------------
def test_arith_is_deterministic_and_well_formed():
    a, b = make_arith_tasks(50, seed=3), make_arith_tasks(50, seed=3)
    assert a == b and a != make_arith_tasks(50, seed=4)
    assert len({t["id"] for t in a}) == 50
    for t in a:
        x, y = map(int, t["question"].split("+"))
        assert 0 <= x <= 99 and 0 <= y <= 99 and t["answer"] == str(x + y) and t["answers"] == [t["answer"]]
        assert not is_heldout(x, y)
    held = make_arith_tasks(20, seed=3, max_operand=9, heldout=True)
    assert all(is_heldout(*map(int, t["question"].split("+"))) for t in held)
    assert {t["id"] for t in held}.isdisjoint(t["id"] for t in make_arith_tasks(20, seed=3, max_operand=9))


# ---- math equivalence ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "pred, gold",
    [
        ("0.5", r"\frac{1}{2}"),
        (r"\dfrac12", r"\frac{1}{2}"),
        ("1/2", r"\frac12"),
        ("(1,2)", "(1, 2)"),
        ("[1,2)", r"\left[ 1, 2 \right)"),
        (r"(-\infty, 2]", r"(-\infty,2]"),
        (r"(3,\pi/2)", r"\left( 3, \frac{\pi}{2} \right)"),
        ("1,2,3", "3,2,1"),
        ("30", r"30^\circ"),
        (r"30^{\circ}", r"30^\circ"),
        ("B", r"\text{(B)}"),
        (r"\textbf{(B)}", "B"),
        (r"\text{Monday}", "Monday"),
        (r"2\sqrt{2}", r"\sqrt{8}"),
        ("x^2+2x+1", "(x+1)^2"),
        ("073", "73"),
        (r"\textbf{(073)}", "073"),
        ("104.", "104"),
        (r"\$18.90", "18.90"),
        (r"10\%", "10"),
        ("$5$", "5"),
        ("x=5", "5"),
        ("2^{100}", "1267650600228229401496703205376"),
        (r"\binom{5}{2}", "10"),
        ("5!", "120"),
    ],
)
def test_math_equiv_accepts(pred, gold):
    assert math_equiv(pred, gold)


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("5", "6"),
        ("(1,2)", "[1,2]"),
        ("(1,2)", "(2,1)"),
        ("C", r"\text{(B)}"),
        (r"\frac{1}{3}", "0.3"),
        (r"\pi", "3.14159"),
        ("", "1"),
        ("  ", "1"),
        (r"\frac{1}{2", r"\frac{1}{2}"),
        (None, "1"),
        ("x+1", "x-1"),
        ("-7", "7"),
    ],
)
def test_math_equiv_rejects(pred, gold):
    assert not math_equiv(pred, gold)


def test_math_equiv_in_a_thread_and_on_runaway_expressions():
    """No signal time-out off the main thread: it must work there, and never hang."""
    results: list[bool] = []

    def check() -> None:
        results.extend(
            [
                math_equiv("0.5", r"\frac{1}{2}"),
                math_equiv(r"9^{9^{9^{9}}}", "5"),
                math_equiv(r"(10^{100})!", "3"),
                math_equiv(r"10^{10^{10}}", "1"),
            ]
        )

    worker = threading.Thread(target=check, daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and results == [True, False, False, False]
    assert time.monotonic() - start < 10


def _shared_rows() -> list[dict]:
    if not SHARED_MATH.is_dir():
        pytest.skip(
            f"shared benchmark data not found at {SHARED_MATH} (outside the project; see data/README.md)"
        )
    return [
        json.loads(line)
        for name in ("math500.jsonl", "aime2024.jsonl")
        for line in (SHARED_MATH / name).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


# AIME 2024 I problem 1 (id 60): its solution ends "$180 + 24 = 204$" with no \boxed{} at all.
NO_BOX_IN_SOLUTION = {"204"}
# Row i+1's answer that genuinely equals row i's: `x=5` is the assignment form of `5`.
GENUINELY_EQUAL = {("x=5", "5")}


def test_gold_solutions_box_their_answers():
    rows = _shared_rows()
    assert len(rows) == 530
    disagree = [
        (i, last_boxed(r["solution"]), str(r["answer"]))
        for i, r in enumerate(rows)
        if not math_equiv(last_boxed(r["solution"]), str(r["answer"]))
    ]
    assert [(i, gold) for i, box, gold in disagree if box is None and gold in NO_BOX_IN_SOLUTION] == [
        (500, "204")
    ]
    assert len(disagree) == 1, disagree  # 529/530 = 99.8%; every solution that boxes its answer agrees


def test_another_rows_answer_is_rejected():
    rows = _shared_rows()
    accepted = []
    for i, r in enumerate(rows):
        gold, other = str(r["answer"]), str(rows[(i + 1) % len(rows)]["answer"])
        if other != gold and math_equiv(other, gold):
            accepted.append((other, gold))
    assert set(accepted) <= GENUINELY_EQUAL, accepted


# ---- rewards --------------------------------------------------------------------------------
def test_rewards_registry():
    assert tuple(REWARDS)[:3] == ("math_equiv", "exact_match", "f1")  # the checker reads these names
    task = {"id": "t", "answer": r"\frac{1}{2}", "answers": ["Jane Austen", "Austen"]}
    assert REWARDS["math_equiv"]("0.5", task, "answer") == 1.0
    assert REWARDS["math_equiv"]("0.4", task, "answer") == 0.0
    assert REWARDS["exact_match"]("austen", task, "answers") == 1.0
    assert REWARDS["f1"]("Jane", task, "answers") == pytest.approx(2 / 3)
    assert all(REWARDS[name](None, task, "answers") == 0.0 for name in REWARDS)
    with pytest.raises(
        ValueError, match="unknown reward function 'accuracy'; known: math_equiv, exact_match, f1"
    ):
        REWARDS.lookup("accuracy")
    with pytest.raises(KeyError, match="no field 'gold'"):
        REWARDS["exact_match"]("x", task, "gold")


# ---- retrieval ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bm25() -> Bm25Retriever:
    return Bm25Retriever(WIKI)


def test_bm25_finds_the_right_document(bm25):
    queries = [
        "who wrote pride and prejudice",
        "capital city of australia",
        "which planet is the red planet",
        "chemical symbol of gold",
        "longest river in south america",
    ]
    results = bm25.search(queries, top_k=3)
    assert [docs[0].title for docs in results] == [
        "Pride and Prejudice",
        "Canberra",
        "Mars",
        "Gold",
        "Amazon River",
    ]
    assert all(len(docs) == 3 for docs in results)
    assert results[1][0] == Document(
        "3",
        "Canberra",
        "Canberra is the capital city of Australia, located at the "
        "northern end of the Australian Capital Territory.",
    )
    assert bm25.search([], 3) == [] and [len(docs) for docs in bm25.search(["xyzzy", "the"], 3)] == [3, 3]
    assert len(bm25.search(["planet"], 100)[0]) == 40  # top_k larger than the corpus


def test_sample_corpus_answers_every_sample_question(bm25):
    tasks = load_tasks(DATA / "qa_sample.jsonl", kind="qa")
    for task, docs in zip(tasks, bm25.search([t["question"] for t in tasks], 3)):
        assert any(
            normalize_answer(g) in normalize_answer(f"{d.title} {d.text}")
            for g in task["answers"]
            for d in docs
        ), task


def test_make_retriever(tmp_path):
    first = make_retriever("bm25", corpus=WIKI)
    assert make_retriever("bm25", corpus=str(WIKI)) is first  # indexed once per process
    assert isinstance(make_retriever("http", url="http://127.0.0.1:1/retrieve", timeout=2.0), HttpRetriever)
    for kind, options, message in [
        ("faiss", {}, "unknown retriever"),
        ("bm25", {"top_k": 3}, "no option top_k"),
        ("bm25", {}, "needs `corpus`"),
        ("http", {}, "needs `url`"),
        ("bm25", {"corpus": tmp_path / "none.jsonl"}, "no such file"),
    ]:
        with pytest.raises(RetrieverError, match=message):
            make_retriever(kind, **options)


def test_corpus_layouts_and_errors(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"id": 7, "title": "Oslo", "text": "Oslo is the capital of Norway."}\n\n'
        '{"contents": "no title line here"}\n'
    )
    docs = Bm25Retriever(corpus).docs
    assert docs == [
        Document("7", "Oslo", "Oslo is the capital of Norway."),
        Document("2", "", "no title line here"),
    ]
    for text, message in [("", "is empty"), ('{"id": 1}\n', ":1: not a JSON object"), ("{oops\n", ":1:")]:
        corpus.write_text(text)
        with pytest.raises(RetrieverError, match=message):
            Bm25Retriever(corpus)


def test_http_retriever_speaks_the_search_r1_protocol(bm25):
    with RetrievalServer(bm25) as server:
        client = HttpRetriever(server.url, timeout=5)
        results = client.search(["capital city of australia", "red planet"], top_k=2)
        assert server.requests == [
            {"queries": ["capital city of australia", "red planet"], "topk": 2, "return_scores": True}
        ]
        assert server.calls == [("POST", "/retrieve", "application/json")]
        HttpRetriever(server.url.removesuffix("/retrieve"), timeout=5).search(["mars"], 1)  # no path given
        assert server.calls[1][:2] == ("POST", "/retrieve") and server.requests[1]["topk"] == 1
    assert results == bm25.search(["capital city of australia", "red planet"], 2)
    assert results[0][0].title == "Canberra" and client.search([], 2) == []


def test_http_retriever_reads_the_reply_in_order(bm25):
    """`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`, one list per query."""
    hits = [
        [
            {"document": {"id": "17", "contents": '"Oslo"\nOslo is the capital of Norway.'}, "score": 9.5},
            {
                "document": {"id": "4", "contents": '"Bergen"\nBergen lies on the west coast.\nRainy.'},
                "score": 3.25,
            },
        ],
        [{"document": {"id": "8", "contents": "no title line"}, "score": 1.0}],
    ]
    with RetrievalServer(bm25, reply=json.dumps({"result": hits}).encode()) as server:
        results = HttpRetriever(server.url, timeout=5).search(["norway capital", "anything"], 2)
    assert results == [
        [
            Document("17", "Oslo", "Oslo is the capital of Norway."),
            Document("4", "Bergen", "Bergen lies on the west coast.\nRainy."),
        ],
        [Document("8", "", "no title line")],
    ]


def test_http_retriever_rejects_a_bad_url():
    for url in ("127.0.0.1:8000/retrieve", "ftp://host/retrieve", "http:///retrieve"):
        with pytest.raises(RetrieverError, match="retrieval server url must be http"):
            HttpRetriever(url)
    with pytest.raises(RetrieverError, match="must be http"):
        make_retriever("http", url="localhost")


def test_http_retriever_retries_server_errors(bm25):
    with RetrievalServer(bm25, fail_first=1) as server:
        assert (
            HttpRetriever(server.url, timeout=5, retries=1, backoff=0.01).search(["mars"], 1)[0][0].title
            == "Mars"
        )
    with RetrievalServer(bm25, fail_first=9) as server, pytest.raises(RetrieverError, match="HTTP 503"):
        HttpRetriever(server.url, timeout=5, retries=2, backoff=0.01).search(["mars"], 1)
    assert len(server.requests) == 3
    with (
        RetrievalServer(bm25, fail_first=9, status=404) as server,
        pytest.raises(RetrieverError, match="HTTP 404"),
    ):
        HttpRetriever(server.url, timeout=5, retries=2, backoff=0.01).search(["mars"], 1)
    assert len(server.requests) == 1  # a client error is not retried
    for reply in (b'{"result": []}', b'{"error": "index not loaded"}', b'{"result": [[{"score": 1.0}]]}'):
        with (
            RetrievalServer(bm25, reply=reply) as server,
            pytest.raises(RetrieverError, match="unexpected reply") as bad,
        ):
            HttpRetriever(server.url, timeout=5).search(["mars"], 1)
        assert "\n" not in str(bad.value)
    with RetrievalServer(bm25, reply=b"<html>") as server, pytest.raises(RetrieverError, match="not JSON"):
        HttpRetriever(server.url, timeout=5).search(["mars"], 1)


def test_unreachable_retrieval_server_fails_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/retrieve"
    start = time.monotonic()
    with pytest.raises(RetrieverError, match=f"cannot reach retrieval server at {url}: .*refused"):
        HttpRetriever(url, timeout=1, retries=2, backoff=0.01).search(["q"], 3)
    assert time.monotonic() - start < 2


# ---- task loaders ---------------------------------------------------------------------------
def test_sample_files_load_and_agree():
    math_tasks = load_tasks(DATA / "math_sample.jsonl", kind="math")
    assert len(math_tasks) == 8 and {"problem", "solution", "subject", "level"} <= set(math_tasks[0])
    assert all(math_equiv(last_boxed(t["solution"]), t["answer"]) for t in math_tasks)
    qa = load_tasks(DATA / "qa_sample.jsonl", kind="qa", limit=3)
    assert [t["id"] for t in qa] == ["qa-sample-0", "qa-sample-1", "qa-sample-2"]
    assert qa[0]["question"] == "who wrote the novel pride and prejudice" and qa[0]["answers"] == [
        "Jane Austen"
    ]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


DAPO_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
    'What is $1+1$?\n\nRemember to put your answer on its own line after "Answer:".'
)


def test_dataset_layouts_are_detected(tmp_path):
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": DAPO_PROMPT}],
            "ability": "MATH",
            "reward_model": {"ground_truth": "2", "style": "rule"},
            "extra_info": {"index": "dapo-1"},
        },
        {
            "id": "train_0",
            "question": "who wrote emma?",
            "golden_answers": ["Jane Austen", "Austen"],
            "prompt": [{"role": "user", "content": "Answer the given question... who wrote emma?"}],
            "reward_model": {"ground_truth": {"target": ["Jane Austen"]}},
        },
        {
            "id": "train_0",
            "question": "capital of peru?",
            "golden_answers": ["Lima"],
        },  # merged sets repeat ids
        {"problem": "AMC", "answer": 142.0, "id": 3},
        {"id": 9, "question": "Olympiad", "final_answer": ["$\\frac{1}{2}$"]},
        {"question": "PopQA", "possible_answers": '["George Rankin", "G. Rankin"]'},
        {"question": "HotpotQA", "answer": "yes"},
        {"ID": "2024-I-1", "Problem": "AIME", "Answer": 204},
        {"question": "TriviaQA", "answer": {"value": "Paris", "aliases": ["Paris", "Paree"]}},
    ]
    tasks = load_tasks(_jsonl(tmp_path / "mix.jsonl", rows), kind="qa")
    got = [(t["id"], t["question"], t["answers"]) for t in tasks]
    assert got == [
        ("dapo-1", "What is $1+1$?", ["2"]),
        ("train_0", "who wrote emma?", ["Jane Austen", "Austen"]),
        ("train_0@2", "capital of peru?", ["Lima"]),
        ("3", "AMC", ["142"]),
        ("9", "Olympiad", ["$\\frac{1}{2}$"]),
        ("mix-5", "PopQA", ["George Rankin", "G. Rankin"]),
        ("mix-6", "HotpotQA", ["yes"]),
        ("2024-I-1", "AIME", ["204"]),
        ("mix-8", "TriviaQA", ["Paris", "Paree"]),
    ]
    assert all(t["answer"] == t["answers"][0] for t in tasks)
    assert tasks[0]["reward_model"]["style"] == "rule"  # original fields are kept
    assert math_equiv("0.5", tasks[4]["answer"])


def test_field_overrides_and_limit(tmp_path):
    path = _jsonl(
        tmp_path / "custom.jsonl",
        [{"q": f"Q{i}", "meta": {"gold": i}, "answer": "ignored"} for i in range(5)],
    )
    tasks = load_tasks(path, kind="math", fields={"question": "q", "answer": "meta.gold"}, limit=2)
    assert [(t["id"], t["question"], t["answer"]) for t in tasks] == [
        ("custom-0", "Q0", "0"),
        ("custom-1", "Q1", "1"),
    ]


def test_parquet_and_json(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"id": f"nq-{i}", "question": f"question {i}", "golden_answers": [f"a{i}", f"b{i}"]} for i in range(4)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "nq.parquet")
    tasks = load_tasks(tmp_path / "nq.parquet", kind="qa", limit=3)
    assert [(t["id"], t["answer"], t["answers"]) for t in tasks] == [
        (f"nq-{i}", f"a{i}", [f"a{i}", f"b{i}"]) for i in range(3)
    ]
    (tmp_path / "list.json").write_text(json.dumps([{"problem": "p", "answer": "1"}]))
    assert load_tasks(tmp_path / "list.json", kind="math")[0]["question"] == "p"
    (tmp_path / "lines.json").write_text('{"problem": "p", "answer": "1"}\n{"problem": "q", "answer": "2"}\n')
    assert len(load_tasks(tmp_path / "lines.json", kind="math")) == 2


def test_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        load_tasks(tmp_path / "missing.jsonl", kind="math")
    assert (
        str(missing.value) == f"cannot read {tmp_path / 'missing.jsonl'}: no such file"
    )  # the CLI's wording
    path = _jsonl(tmp_path / "bad.jsonl", [{"problem": "ok", "answer": "1"}, {"problem": "no answer here"}])
    with pytest.raises(ValueError, match=r"bad.jsonl:2: no answer field .*problem"):
        load_tasks(path, kind="math")
    (tmp_path / "broken.jsonl").write_text('{"problem": "ok", "answer": "1"}\n{oops\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: invalid JSON"):
        load_tasks(tmp_path / "broken.jsonl", kind="math")
    _jsonl(tmp_path / "empty_answer.jsonl", [{"question": "q", "golden_answers": []}])
    with pytest.raises(ValueError, match="empty answer"):
        load_tasks(tmp_path / "empty_answer.jsonl", kind="qa")
    with pytest.raises(ValueError, match="no question field"):
        load_tasks(path, kind="math", fields={"question": "title"})
    (tmp_path / "data.txt").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"unsupported task file type '\.txt'"):
        load_tasks(tmp_path / "data.txt", kind="math")
    with pytest.raises(ValueError, match="unknown task kind"):
        load_tasks(path, kind="code")
    with pytest.raises(ValueError, match="needs a data file"):
        load_tasks(None, kind="qa")


def test_arith_without_a_file_is_generated():
    assert load_tasks(None, kind="arith", limit=5) == make_arith_tasks(5)


@pytest.mark.parametrize(
    "pred",
    [
        r"\int_0^1 e^{x^{x^x}} dx",  # 43 s to compare before the guard
        "x^" * 40 + "2",
        "{x^" * 12 + "2" + "}" * 12,  # power towers: parsing is exponential in the height
        r"\binom{100^{\pi}^{10^{100^{\pi}}}}{100^{\int_0^{9} 9 dx^{100}}}",  # > 100 s to parse before the guard
        r"\sqrt{\binom{\pi}{(\binom{9+(100)!}{\int_0^{0.5} (e)! dx})!}}",
        r"\frac{2\cdot 10}{\binom{100}{n}}",
        r"\binom{\binom{e}{\pi^{n}\cdot 10+100}}{10}",  # 46 s; > 5 min
        "x" * 5000,
        "(" * 300 + "1" + ")" * 300,
    ],
)
def test_runaway_answers_are_bounded_off_the_main_thread(pred):
    """No signal time-out in a worker thread: such answers are compared as strings only."""
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(math_equiv(pred, "1")), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(30)
    assert results == [False] and time.monotonic() - start < 3


# ---- generic task kinds ----------------------------------------------------------------------
def test_generic_jsonl_keeps_rows_without_question_or_answer(tmp_path):
    rows = [
        {"text": "free form", "label": 1},
        {"question": "who wrote emma?", "meta": {"k": "x"}},
        {"answer": 142.0, "id": "r2"},
    ]
    tasks = load_tasks(_jsonl(tmp_path / "rows.jsonl", rows), kind="jsonl")
    assert tasks == [
        {"text": "free form", "label": 1, "id": "rows-0"},
        {"question": "who wrote emma?", "meta": {"k": "x"}, "id": "rows-1"},
        {"answer": "142", "answers": ["142"], "id": "r2"},
    ]


def test_generic_kinds_read_mapped_fields(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"uid": f"u{i}", "body": {"text": f"Q{i}"}, "gold": [f"g{i}", "alt"]} for i in range(3)]
    fields = {"question": "body.text", "answer": "gold", "id": "uid"}
    want = [(f"u{i}", f"Q{i}", f"g{i}", [f"g{i}", "alt"]) for i in range(2)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    for path, kind in (
        (_jsonl(tmp_path / "rows.jsonl", rows), "jsonl"),
        (tmp_path / "rows.parquet", "parquet"),
    ):
        tasks = load_tasks(path, kind=kind, fields=fields, limit=2)
        assert [(t["id"], t["question"], t["answer"], t["answers"]) for t in tasks] == want
        assert tasks[0]["body"] == {"text": "Q0"}
    only_id = load_tasks(tmp_path / "rows.parquet", kind="parquet", fields={"id": "body.text"})
    assert [t["id"] for t in only_id] == ["Q0", "Q1", "Q2"] and "question" not in only_id[0]


def test_generic_kinds_errors(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = _jsonl(tmp_path / "rows.jsonl", [{"q": "a", "uid": 1}, {"q": "b"}, {"q": ""}])
    with pytest.raises(ValueError, match=r"^.*rows.jsonl:2: no id field \(looked for uid; record has q\)$"):
        load_tasks(path, kind="jsonl", fields={"id": "uid"})
    with pytest.raises(ValueError, match=r"rows.jsonl:3: empty question \(field `q`\)$"):
        load_tasks(path, kind="jsonl", fields={"question": "q"})
    pq.write_table(
        pa.Table.from_pylist([{"q": "a", "a": "1"}, {"q": "b", "a": None}]), tmp_path / "t.parquet"
    )
    with pytest.raises(
        ValueError, match=r"t.parquet row 1: no answer field \(looked for a; record has q, a\)$"
    ):
        load_tasks(tmp_path / "t.parquet", kind="parquet", fields={"answer": "a"})
    for name, kind in (("rows.json", "jsonl"), ("rows.jsonl", "parquet"), ("rows", "jsonl")):
        with pytest.raises(ValueError, match=rf"{name}: a `{kind}` task reads a .{kind} file, not "):
            load_tasks(tmp_path / name, kind=kind)
    with pytest.raises(ValueError, match="unknown field mapping gold"):
        load_tasks(path, kind="jsonl", fields={"gold": "q"})
    with pytest.raises(ValueError, match="`parquet` task needs a data file"):
        load_tasks(None, kind="parquet")


def test_id_mapping_for_math_and_qa(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", [{"problem": "p", "answer": "1", "id": "x", "meta": {"key": "k7"}}])
    assert load_tasks(path, kind="math", fields={"id": "meta.key"})[0]["id"] == "k7"
    assert load_tasks(path, kind="qa")[0]["id"] == "x"
    with pytest.raises(ValueError, match=r"m.jsonl:1: no id field \(looked for uid;"):
        load_tasks(path, kind="qa", fields={"id": "uid"})
