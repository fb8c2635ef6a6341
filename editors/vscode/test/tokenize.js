// Tokenizes .srpo files with the extension's grammar the way VS Code does (vscode-textmate on the
// Oniguruma regex engine, vscode-oniguruma) and prints, as JSON, each file's tokens per line:
//   {"FILE": [[[startColumn, endColumn, "text", ["source.srpo", ...scopes]], ...], ...], ...}
// Usage: node test/tokenize.js FILE.srpo...   (from editors/vscode, after `npm ci`)
"use strict";

const fs = require("fs");
const path = require("path");
const oniguruma = require("vscode-oniguruma");
const textmate = require("vscode-textmate");

const GRAMMAR = path.join(__dirname, "..", "syntaxes", "srpo.tmLanguage.json");
const WASM = path.join(path.dirname(require.resolve("vscode-oniguruma")), "onig.wasm");

async function loadGrammar() {
  const wasm = fs.readFileSync(WASM);
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const onigLib = Promise.resolve({
    createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
    createOnigString: (text) => new oniguruma.OnigString(text),
  });
  const registry = new textmate.Registry({
    onigLib,
    loadGrammar: async (scopeName) =>
      scopeName === "source.srpo"
        ? textmate.parseRawGrammar(fs.readFileSync(GRAMMAR, "utf8"), GRAMMAR)
        : null,
  });
  return registry.loadGrammar("source.srpo");
}

function tokenizeFile(grammar, file) {
  const lines = fs.readFileSync(file, "utf8").split(/\r?\n/);
  let stack = textmate.INITIAL;
  return lines.map((line) => {
    const result = grammar.tokenizeLine(line, stack);
    stack = result.ruleStack;
    // The last token may end one past the line (vscode-textmate reads each line with its "\n").
    const ends = result.tokens.map((t) => Math.min(t.endIndex, line.length));
    return result.tokens
      .map((t, i) => [t.startIndex, ends[i], line.slice(t.startIndex, ends[i]), t.scopes])
      .filter((t) => t[1] > t[0] || line.length === 0);
  });
}

async function main(files) {
  if (files.length === 0) {
    process.stderr.write("usage: node test/tokenize.js FILE.srpo...\n");
    process.exit(2);
  }
  const grammar = await loadGrammar();
  const out = {};
  for (const file of files) {
    out[file] = tokenizeFile(grammar, file);
  }
  process.stdout.write(JSON.stringify(out));
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`tokenize.js: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
