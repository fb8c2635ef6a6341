"""A well-formed base workflow and one small mutation per diagnostic code (golden cases)."""

BASE = """workflow t
policy lm = hf("m")
task math(data = "d.jsonl")
tool web = bm25(corpus = "c.jsonl")
agent router uses lm prompt "p.j2" emits route(solver)
agent solver[3] uses lm prompt "p.j2" emits boxed
agent verifier uses lm prompt "p.j2" emits verdict(approve, reject)
agent searcher[2] uses lm prompt "p.j2" emits search
agent agg uses lm prompt "p.j2" emits final_boxed
repeat at most 2 {
  route router
  parallel solver by router
  verify verifier
  parallel searcher
  call web on searcher
} until verifier == approve
aggregate agg
reward math_equiv(agg, task.answer) invalid -0.1
"""

# code -> (old, new): replace `old` in BASE by `new`; the case expects that code.
MUTATIONS: dict[str, tuple[str, str]] = {
    "E001": ("verify verifier\n", "verify 3\n"),
    "E002": ('prompt "p.j2" emits boxed', 'prompt "p.j2 emits boxed'),
    "E003": ("aggregate agg\nreward math_equiv(agg, task.answer) invalid -0.1\n", "aggregate"),
    "E004": ('agent agg uses lm prompt "p.j2" emits', "agent agg uses lm emits"),
    "E005": ("repeat at most 2 {", "repeat 2 {"),
    "E006": ('policy lm = hf("m")', 'policy lm hf("m")'),
    "E007": ("until verifier == approve", "until verifier"),
    "E008": (
        "aggregate agg\n",
        "repeat at most 2 { " * 65 + "verify verifier " + "} " * 65 + "\naggregate agg\n",
    ),
    "E010": ("agent agg uses", "agent solver uses"),
    "E011": ("agent agg uses lm", "agent agg uses llm"),
    "E012": ("aggregate agg\n", "aggregate agr\n"),
    "E013": ("call web on", "call wbe on"),
    "E014": ("call web on", "step wbe on"),
    "E020": ('policy lm = hf("m")', 'policy lm = hff("m")'),
    "E021": ("task math(data", "task maths(data"),
    "E022": ("tool web = bm25(", "tool web = bm26("),
    "E023": ("emits final_boxed", "emits final_boxed with (max_token = 5)"),
    "E024": ("emits final_boxed", "emits final_boxed with (max_tokens = 0)"),
    "E025": ('task math(data = "d.jsonl")\n', ""),
    "E026": ("reward math_equiv(agg, task.answer) invalid -0.1\n", ""),
    "E027": ("reward math_equiv", "train with (lr = 1e-6)\ntrain with (lr = 1e-5)\nreward math_equiv"),
    "E028": ("reward math_equiv", "reward math_equal"),
    "E029": ("task.answer)", "answer)"),
    "E030": ("emits final_boxed", "emits final_box"),
    "E031": ("emits final_boxed", "emits final_boxed(x)"),
    "E032": ("verdict(approve, reject)", "verdict(approve, approve)"),
    "E040": ("agent solver[3]", "agent solver[0]"),
    "E041": ("  parallel searcher\n", "  parallel searcher[1, 3]\n"),
    "E042": ("  parallel searcher\n", "  parallel searcher[2, 2]\n"),
    "E043": ("parallel solver by router", "parallel searcher by router"),
    "E044": ("  route router\n", ""),
    "E045": ("aggregate agg\n", "aggregate verifier\n"),
    "E046": ("call web on searcher", "call web on verifier"),
    "E047": ("verify verifier\n", "verify verifier by router\n"),
    "E050": ("repeat at most 2 {", "repeat {"),
    "E051": ("repeat at most 2 {", "repeat at most 0 {"),
    "E052": ("aggregate agg\n", "repeat at most 2 { }\naggregate agg\n"),
    "E053": ("aggregate agg\n", "break if verifier == approve\naggregate agg\n"),
    "E054": (BASE[BASE.index("repeat") : BASE.index("reward")], ""),
    "E055": (
        "aggregate agg\n",
        "repeat at most 3 { if verifier == reject { revise solver[2] } }\naggregate agg\n",
    ),
    "E060": ("until verifier == approve", "until agg == approve"),
    "E061": ("until verifier == approve", "until verifier == approved"),
    "E062": ("repeat at most 2 {", "if verifier == reject { verify verifier }\nrepeat at most 2 {"),
    "E070": ("reward math_equiv(agg", "reward math_equiv(solver"),
    "E073": ("reward math_equiv(agg", "reward math_equiv(verifier"),
    "E074": ("emits final_boxed", "emits final_boxed with (calls = 2)"),
    "E075": ("emits final_boxed", "emits final_boxed with (stop = replica)"),
    "E071": (
        "reward math_equiv(agg",
        'agent spare uses lm prompt "p.j2" emits text\nreward math_equiv(spare',
    ),
    "E080": ('agent agg uses lm prompt "p.j2"', 'agent agg uses lm prompt "missing.j2"'),
    "E081": ('agent agg uses lm prompt "p.j2"', 'agent agg uses lm prompt "broken.j2"'),
    "E082": ('agent agg uses lm prompt "p.j2"', 'agent agg uses lm prompt "unknown_var.j2"'),
    "W001": ("agent agg uses", 'agent spare uses lm prompt "p.j2" emits text\nagent agg uses'),
    "W002": ('policy lm = hf("m")', 'policy lm = hf("m") frozen'),
    "W005": (
        "emits final_boxed\n",
        'emits final_boxed\npolicy fixed = hf("m") frozen\n'
        'agent spare uses fixed prompt "p.j2" emits text with (trained = false)\n',
    ),
    "W006": (
        "emits final_boxed\n",
        'emits final_boxed\nagent spare uses lm prompt "p.j2" emits text with (retries = 2)\n',
    ),
}

TEMPLATES = {
    "p.j2": "{{ task.question }} {% for o in team_context %}{{ o.text }}{% endfor %}",
    "broken.j2": "{{ task.question }\n",
    "unknown_var.j2": "{{ task.question }}\n{{ hstory }}\n",
}


def mutate(code: str) -> str:
    old, new = MUTATIONS[code]
    assert old in BASE, code
    return BASE.replace(old, new, 1)
