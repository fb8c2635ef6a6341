// Runs the real extension (../extension.js), with the real vscode-languageclient, under node as VS
// Code runs it, against a language server command; test/vscode.js stands in for the `vscode` module.
//   1. DIAG_FILE is open, as when opening a .srpo file activates the extension; `activate` starts
//      the server from the `srpo.server.command` setting, and the client sends the document;
//   2. the server's diagnostics for it arrive in the client's DiagnosticCollection;
//   3. FORMAT_FILE is opened, then formatted: the formatting provider the client registered returns
//      TextEdits, applied to the text as VS Code applies them;
//   4. "srpo-dsl: Show the compiled graph" is run with each document active;
//   5. `deactivate` stops the server.
// Prints, as JSON: {"spawned": [[command, ...args]], "shown": [{level, message}], "unhandled":
// [rejected promises nobody handled], "diagnostics": [{code, severity, source, line, col, message}],
// "edits": N, "formatted": TEXT, "graphs": [{language, text} or null per document], "failure": null or why, "stubbed": [names the stand-in did not
// implement], "output": the output channel's text}.
// Exit 0 when every step happened, 1 when one did not ("failure" says which), 2 on a usage error.
// Usage (from editors/vscode, after `npm ci`):
//   node test/client.js [--trace=off|messages|verbose] DIAG_FILE FORMAT_FILE -- COMMAND [ARG...]
"use strict";

const childProcess = require("child_process");
const fs = require("fs");
const Module = require("module");
const path = require("path");
const { vscode, harness, openFolder, openTextDocument } = require("./vscode");

const STEP_TIMEOUT_MS = 15000;
const SEVERITY = ["error", "warning", "information", "hint"];

function parseArgs(argv) {
  const dash = argv.indexOf("--");
  const options = dash < 0 ? argv : argv.slice(0, dash);
  const command = dash < 0 ? [] : argv.slice(dash + 1);
  const files = options.filter((a) => !a.startsWith("--trace="));
  const trace = options.filter((a) => a.startsWith("--trace=")).map((a) => a.slice("--trace=".length));
  if (files.length !== 2 || command.length === 0 || files.some((f) => f.startsWith("-"))) {
    process.stderr.write(
      "usage: node test/client.js [--trace=off|messages|verbose] DIAG_FILE FORMAT_FILE -- COMMAND [ARG...]\n"
    );
    process.exit(2);
  }
  const [diagFile, formatFile] = files.map((f) => path.resolve(f));
  return { diagFile, formatFile, command, trace: trace.pop() || "off" };
}

// `require("vscode")`, from the extension and from vscode-languageclient, gets the stand-in.
function installStandIn() {
  const load = Module._load;
  Module._load = function (request, ...rest) {
    return request === "vscode" ? vscode : load.call(this, request, ...rest);
  };
}

// Records the command line of every process started (the client spawns the server).
function recordSpawns() {
  const spawned = [];
  const spawn = childProcess.spawn;
  childProcess.spawn = function (command, args, ...rest) {
    spawned.push([command, ...(args || [])]);
    return spawn.call(this, command, args, ...rest);
  };
  return spawned;
}

function withTimeout(promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    const fail = () => reject(new Error(`timed out after ${STEP_TIMEOUT_MS} ms: ${what}`));
    timer = setTimeout(fail, STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// The document's diagnostics at the first change to them that `accept` takes.
function nextDiagnostics(uri, accept) {
  return new Promise((resolve) => {
    const subscription = vscode.languages.onDidChangeDiagnostics((event) => {
      const diagnostics = vscode.languages.getDiagnostics(uri);
      if (event.uris.some((u) => u.toString() === uri.toString()) && accept(diagnostics)) {
        subscription.dispose();
        resolve(diagnostics);
      }
    });
  });
}

function asJson(d) {
  const code = d.code !== null && typeof d.code === "object" ? d.code.value : d.code;
  const at = { line: d.range.start.line + 1, col: d.range.start.character + 1 };
  return { code, severity: SEVERITY[d.severity], source: d.source, ...at, message: d.message };
}

// VS Code applies a provider's edits together, each to the original text: from the last one back.
function applyEdits(document, edits) {
  const offsets = (range) => [document.offsetAt(range.start), document.offsetAt(range.end)];
  const spans = edits.map((e) => [...offsets(e.range), e.newText]);
  spans.sort((a, b) => b[0] - a[0]);
  let text = document.getText();
  for (const [start, end, newText] of spans) text = text.slice(0, start) + newText + text.slice(end);
  return text;
}

async function format(document, result) {
  const registered = harness.providers.find(
    (p) => p.kind === "documentFormatting" && vscode.languages.match(p.selector, document) > 0
  );
  if (!registered) throw new Error("the client registered no formatting provider for .srpo documents");
  const token = new vscode.CancellationTokenSource().token;
  const options = { tabSize: 4, insertSpaces: true };
  const edits = (await registered.provider.provideDocumentFormattingEdits(document, options, token)) || [];
  result.edits = edits.length;
  result.formatted = applyEdits(document, edits);
}

async function run(extension, opts, result) {
  const opened = openTextDocument(opts.diagFile, "srpo", fs.readFileSync(opts.diagFile, "utf8"));
  const diagnosed = nextDiagnostics(opened.uri, (d) => d.length > 0);
  await withTimeout(extension.activate({ subscriptions: [] }), "activate");
  const errors = harness.shown.filter((m) => m.level === "error");
  if (errors.length > 0) throw new Error(`activation failed: ${errors[0].message}`);
  result.diagnostics = (await withTimeout(diagnosed, `diagnostics for ${opts.diagFile}`)).map(asJson);
  const messy = vscode.Uri.file(opts.formatFile);
  const synced = nextDiagnostics(messy, () => true); // the server has read the document
  const document = openTextDocument(opts.formatFile, "srpo", fs.readFileSync(opts.formatFile, "utf8"));
  await withTimeout(synced, `diagnostics for ${opts.formatFile}`);
  await withTimeout(format(document, result), `formatting ${opts.formatFile}`);
  result.graphs = await withTimeout(showGraphs(opened, document), "srpo-dsl: Show the compiled graph");
}

// The palette's "srpo-dsl: Show the compiled graph" with each document active: what it opened
// beside it ({language, text}), or null (with the message it showed).
async function showGraphs(...documents) {
  const graphs = [];
  for (const document of documents) {
    vscode.window.activeTextEditor = { document };
    const shown = await vscode.commands.executeCommand("srpo.showCompiledGraph");
    graphs.push(shown ? { language: shown.languageId, text: shown.getText() } : null);
  }
  return graphs;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  installStandIn();
  const result = {
    spawned: recordSpawns(),
    shown: harness.shown,
    unhandled: [], // VS Code's extension host logs a rejected promise nobody handled, and goes on
    diagnostics: null,
    edits: null,
    formatted: null,
    graphs: null,
  };
  process.on("unhandledRejection", (err) => result.unhandled.push(String(err)));
  harness.settings["srpo.server.command"] = opts.command;
  harness.settings["srpo.trace.server"] = opts.trace;
  openFolder(path.dirname(opts.diagFile));
  const extension = require("../extension.js");
  result.failure = await run(extension, opts, result).then(
    () => null,
    (err) => err.message
  );
  const stopped = await withTimeout(Promise.resolve(extension.deactivate()), "deactivate").then(
    () => null,
    (err) => `deactivate: ${err.message}`
  );
  result.failure = result.failure || stopped;
  result.stubbed = [...harness.stubbed].sort();
  result.output = harness.output.join("");
  process.stdout.write(`${JSON.stringify(result, null, 1)}\n`);
  process.exit(result.failure ? 1 : 0);
}

main();
