// The real extension (../extension.js) with the real vscode-languageclient under node, timed on big
// workflows for bench/lsp_scale.py: per file of the job's `paths`, opened as VS Code opens it,
// `times` edits (a comment line appended), each one's milliseconds until its diagnostics reach the
// client's DiagnosticCollection; then per entry of `requests[file name]` ({label, method, params},
// the params' textDocument.uri set to the document's) `times` client.sendRequest calls, each one's
// milliseconds until its result. The LanguageClient is the one extension.js constructs.
// Prints, as JSON: {"scale": {FILE NAME: {label: [ms, ...]}}, "failure": null or why}.
// Exit 0 when every step happened, 1 when one did not, 2 on a usage error.
// Usage (from editors/vscode, after `npm ci`):
//   node test/scale.js JOB.json -- COMMAND [ARG...]
"use strict";

const fs = require("fs");
const Module = require("module");
const path = require("path");
const { vscode, harness, openFolder, openTextDocument, changeTextDocument } = require("./vscode");

const STEP_TIMEOUT_MS = 120000;

function parseArgs(argv) {
  const dash = argv.indexOf("--");
  if (dash !== 1 || argv.length < 3) {
    process.stderr.write("usage: node test/scale.js JOB.json -- COMMAND [ARG...]\n");
    process.exit(2);
  }
  return { job: JSON.parse(fs.readFileSync(argv[0], "utf8")), command: argv.slice(2) };
}

// `require("vscode")` gets the stand-in; every LanguageClient constructed is kept in `made`.
function installStandIn(made) {
  const load = Module._load;
  Module._load = function (request, ...rest) {
    return request === "vscode" ? vscode : load.call(this, request, ...rest);
  };
  const languageClient = require("vscode-languageclient/node"); // after the stand-in: it needs it
  const Base = languageClient.LanguageClient;
  languageClient.LanguageClient = class extends Base {
    constructor(...args) {
      super(...args);
      made.push(this);
    }
  };
}

function withTimeout(promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${STEP_TIMEOUT_MS} ms: ${what}`)), STEP_TIMEOUT_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// Resolves at the next change of `uri`'s diagnostics.
function nextDiagnostics(uri) {
  return new Promise((resolve) => {
    const subscription = vscode.languages.onDidChangeDiagnostics((event) => {
      if (event.uris.some((u) => u.toString() === uri.toString())) {
        subscription.dispose();
        resolve();
      }
    });
  });
}

async function timed(times, step) {
  const out = [];
  for (let k = 1; k <= times; k++) {
    const start = process.hrtime.bigint();
    await step(k);
    out.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return out;
}

async function measure(client, file, job) {
  const text = fs.readFileSync(file, "utf8");
  const uri = vscode.Uri.file(file);
  const opened = nextDiagnostics(uri);
  const document = openTextDocument(file, "srpo", text);
  await withTimeout(opened, `diagnostics for ${file}`);
  const edit = (k) => {
    const arrived = nextDiagnostics(uri);
    changeTextDocument(document, `${text}# edit ${k}\n`);
    return withTimeout(arrived, `diagnostics of edit ${k}`);
  };
  const out = { diagnostics: await timed(job.times, edit) };
  for (const { label, method, params } of job.requests[path.basename(file)]) {
    const asked = { ...params, textDocument: { uri: uri.toString() } };
    out[label] = await timed(job.times, () => withTimeout(client.sendRequest(method, asked), method));
  }
  return out;
}

async function run(extension, made, job) {
  await withTimeout(extension.activate({ subscriptions: [] }), "activate");
  const errors = harness.shown.filter((m) => m.level === "error");
  if (errors.length > 0 || made.length !== 1) {
    throw new Error(`activation failed: ${errors.length ? errors[0].message : "no LanguageClient"}`);
  }
  const scale = {};
  for (const file of job.paths) scale[path.basename(file)] = await measure(made[0], path.resolve(file), job);
  return scale;
}

async function main() {
  const { job, command } = parseArgs(process.argv.slice(2));
  const made = [];
  installStandIn(made);
  harness.settings["srpo.server.command"] = command;
  openFolder(path.dirname(path.resolve(job.paths[0])));
  const extension = require("../extension.js");
  const result = { scale: null, failure: null };
  await run(extension, made, job).then(
    (scale) => (result.scale = scale),
    (err) => (result.failure = err.message)
  );
  await withTimeout(Promise.resolve(extension.deactivate()), "deactivate").catch((err) => {
    result.failure = result.failure || `deactivate: ${err.message}`;
  });
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(result.failure ? 1 : 0);
}

main();
