"""srpo_dsl.template_sandbox: an operator, filter or string method that would build a value over the
limits is refused before it runs, at render time (`TooBig`) and, for a constant, by the checker
(`oversized_constants`). Every case runs in one child process with a timeout: a regression fails here
instead of holding the suite for minutes and gigabytes."""

import json
import subprocess
import sys

from tests.support.clitools import ROOT

N = 10**10  # the context's `n`: every refused case asks for about this many items (or bits)
REFUSED = {  # template -> the start of what the sandbox says
    "{{ 9 ** n }}": "`**` would build a number of about 40,000,000,000 bits",
    "{{ (3 ** 40000) * (3 ** 40000) }}": "`*` would build a number of about 126,798 bits",
    "{{ 'a' * n }}": "`*` would build 10,000,000,000 items",
    "{{ n * [1, 2] }}": "`*` would build 20,000,000,000 items",
    "{% set s = namespace(v='ab') %}{% for i in range(30) %}{% set s.v = s.v + s.v %}{% endfor %}": (
        "`+` would build 16,777,216 items"
    ),
    "{{ '%0*d' % (n, 1) }}": "`%` would build a format width of 10,000,000,000",
    "{{ '%09999999999d' % 1 }}": "`%` would build a format width of 9,999,999,999",
    "{{ 'a' | center(n) }}": "`center` would build 10,000,000,000 items",
    "{{ 'a' | indent(width=n) }}": "`indent` would build 10,000,000,000 items",
    "{{ [1] | slice(n) | list }}": "`slice` would build 10,000,000,000 items",
    "{{ [1] | batch(n, 0) | list }}": "`batch` would build 10,000,000,000 items",
    "{{ {'a': 1} | tojson(indent=n) }}": "`tojson` would build 10,000,000,000 items",
    "{{ '%0*d' | format(n, 1) }}": "`format` would build a format width of 10,000,000,000",
    "{{ 'a'.ljust(n) }}": "`ljust` would build 10,000,000,000 items",
    "{{ '{:>{}}'.format('a', n) }}": "`format` would build a format width of 10,000,000,000",
    "{{ '{:>9999999999}'.format('a') }}": "`format` would build a format width of 9,999,999,999",
    "{{ '{a:>{b}}'.format_map({'a': 1, 'b': n}) }}": "`format_map` would build a format width of",
}
RENDER_TIME_ONLY = {t for t in REFUSED if "{%" in t or "'." in t}  # a loop, a string method: not constants
ALLOWED = {  # template -> its rendering: numbers, lengths and widths under the limits
    "{{ n * 2 }} {{ 2 ** 64 }} {{ n | filesizeformat }}": f"{2 * N} {2**64} 10.0 GB",
    "{{ 'ab' * 3 }}|{{ 'x' | center(5) }}|{{ 'a'.ljust(3) }}|{{ '{}-{}'.format(1, n) }}": (
        f"ababab|  x  |a  |1-{N}"
    ),
    "{{ '%5d' % 42 }}|{{ '%d' | format(n) }}|{{ [1, 2, 3] | batch(2) | list }}": f"   42|{N}|[[1, 2], [3]]",
    "{{ '{\"id\": 12345678901} %s' % 1 }}|{{ '{{12345678901}} {}'.format(2) }}": (  # no spec: text, `{{`
        '{"id": 12345678901} 1|{12345678901} 2'
    ),
}
CHILD = """
import json, re, sys
from srpo_dsl.template_sandbox import BoundedSandbox, oversized_constants
env, out = BoundedSandbox(), {}
for text in json.loads(sys.argv[1]):
    const = oversized_constants(env.parse(re.sub(r"\\bn\\b", "10000000000", text)))
    try:
        out[text] = [env.from_string(text).render(n=10**10), const]
    except Exception as exc:
        out[text] = [f"{type(exc).__name__}: {exc}", const]
print(json.dumps(out))
"""


def _results() -> dict[str, list]:
    templates = [*REFUSED, *ALLOWED]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(templates)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_values_over_the_limits_are_refused_before_they_are_built_and_others_render():
    """Each refused case is `TooBig` at render time; written with constants (the context's `n` replaced
    by its value) the checker finds it on line 1 without computing it; the allowed ones render."""
    results = _results()
    for template, said in REFUSED.items():
        rendered, const = results[template]
        assert rendered.startswith(f"TooBig: {said}"), (template, rendered)
        if template not in RENDER_TIME_ONLY:
            assert list(const) == ["1"] and const["1"].startswith(said.split(" about")[0]), (template, const)
    for template, rendered in ALLOWED.items():
        assert results[template] == [rendered, {}], template
