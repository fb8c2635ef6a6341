// Loads ../grammar.js as `tree-sitter generate` first does (under node, with the grammar DSL's
// functions in scope) and prints its rules as JSON: each rule a tree of {type, ...} nodes, every
// `$.name` a {type: "SYMBOL", name}. tests/editors/test_treesitter.py checks the tree against the Lark grammar.
//
//   node editors/neovim/tree-sitter-srpo/test/rules.js
const node = (type) => (...members) => ({ type, members });
Object.assign(global, {
  seq: node("SEQ"),
  choice: node("CHOICE"),
  token: (content) => ({ type: "TOKEN", content }),
  prec: (value, content) => ({ type: "PREC", value, content }),
  field: (name, content) => ({ type: "FIELD", name, content }),
  alias: (content, to) => ({ type: "ALIAS", content, value: to.name }),
  grammar: (spec) => spec,
});
const literal = (value) =>
  typeof value === "string" ? { type: "STRING", value }
  : value instanceof RegExp ? { type: "PATTERN", value: value.source }
  : value;
const normal = (value) => {
  value = literal(value);
  for (const key of ["members", "content"]) {
    if (Array.isArray(value[key])) value[key] = value[key].map(normal);
    else if (value[key] !== undefined) value[key] = normal(value[key]);
  }
  return value;
};
const $ = new Proxy({}, { get: (_, name) => ({ type: "SYMBOL", name }) });
const spec = require("../grammar.js");
const rules = {};
for (const [name, rule] of Object.entries(spec.rules)) rules[name] = normal(rule($));
const out = { name: spec.name, word: spec.word($), extras: spec.extras($).map(literal), rules };
process.stdout.write(JSON.stringify(out));
