// A stand-in for VS Code's `vscode` API module, for running the real extension and the real
// vscode-languageclient under node (test/client.js, test/scale.js). It implements, as VS Code does,
// what the client calls to start a server, open documents, show diagnostics and format: configuration,
// text documents and their events, workspace folders, output channels, messages, diagnostic
// collections, document selectors, provider registration, Uri/Position/Range/Diagnostic/TextEdit.
// Any other name the client touches is served by a recording stub (a no-op function that returns
// a Disposable, or an empty class) and listed in `harness.stubbed`, so a run shows what it did not
// exercise: a stubbed event never fires, a stubbed registration is never called, and a stub used
// in any other way fails loudly.
"use strict";

const path = require("path");
const url = require("url");
// The same API as vscode.EventEmitter and vscode.CancellationTokenSource.
const { Emitter, CancellationTokenSource } = require("vscode-jsonrpc");

const harness = {
  settings: {}, // "section.key" -> value, as a user's settings.json
  shown: [], // {level, message} for every window.show*Message
  output: [], // what was written to output channels
  stubbed: new Set(), // names served by a stub
  providers: [], // {kind, selector, provider} for every provider registered (formatting's here)
  commands: {}, // id -> callback, every command registered (the extension's and the client's)
  untitled: [], // documents opened with openTextDocument({language, content})
  editors: [], // editors shown with window.showTextDocument
};

class Disposable {
  constructor(dispose) {
    this._dispose = dispose;
  }
  static from(...items) {
    return new Disposable(() => items.forEach((d) => d && d.dispose()));
  }
  dispose() {
    if (this._dispose) this._dispose();
    this._dispose = undefined;
  }
}

class CancellationError extends Error {
  constructor() {
    super("Canceled");
    this.name = "Canceled";
  }
}

// File URIs only: the documents here are files.
class Uri {
  constructor(fsPath) {
    this.scheme = "file";
    this.fsPath = path.resolve(fsPath);
    this.path = url.pathToFileURL(this.fsPath).pathname;
  }
  static file(fsPath) {
    return new Uri(fsPath);
  }
  static parse(value) {
    if (!value.startsWith("file:")) throw new Error(`stand-in Uri.parse: not a file URI: ${value}`);
    return new Uri(url.fileURLToPath(value));
  }
  toString() {
    return url.pathToFileURL(this.fsPath).href;
  }
  toJSON() {
    return this.toString();
  }
}

class Position {
  constructor(line, character) {
    this.line = line;
    this.character = character;
  }
}

class Range {
  constructor(a, b, c, d) {
    [this.start, this.end] = a instanceof Position ? [a, b] : [new Position(a, b), new Position(c, d)];
  }
}

const DiagnosticSeverity = { Error: 0, Warning: 1, Information: 2, Hint: 3 };

class Diagnostic {
  constructor(range, message, severity = DiagnosticSeverity.Error) {
    Object.assign(this, { range, message, severity });
  }
}

class TextEdit {
  constructor(range, newText) {
    Object.assign(this, { range, newText });
  }
}

// A hierarchical code action kind ("quickfix", "refactor.extract"): the client builds the server's
// kinds from CodeActionKind.Empty with `append`.
class CodeActionKind {
  constructor(value) {
    this.value = value;
  }
  append(part) {
    return new CodeActionKind(this.value ? `${this.value}.${part}` : part);
  }
  contains(other) {
    return this.value === "" || other.value === this.value || other.value.startsWith(`${this.value}.`);
  }
  intersects(other) {
    return this.contains(other) || other.contains(this);
  }
}
CodeActionKind.Empty = new CodeActionKind("");
CodeActionKind.QuickFix = CodeActionKind.Empty.append("quickfix");
CodeActionKind.Refactor = CodeActionKind.Empty.append("refactor");
CodeActionKind.Source = CodeActionKind.Empty.append("source");

// A document as VS Code keeps it (what the client reads of it): LF line ends, offsets in UTF-16 code
// units (JS string indices).
class TextDocument {
  constructor(file, languageId, text) {
    Object.assign(this, { uri: Uri.file(file), languageId, version: 1 });
    this._text = text;
  }
  offsetAt(position) {
    const lines = this._text.split("\n");
    const line = Math.min(position.line, lines.length - 1);
    const before = lines.slice(0, line).reduce((n, l) => n + l.length + 1, 0);
    return before + Math.min(position.character, lines[line].length);
  }
  getText(range) {
    return range ? this._text.slice(this.offsetAt(range.start), this.offsetAt(range.end)) : this._text;
  }
}

// VS Code's score of a document selector against a document (0: no match); only the filters the
// extension uses (language, scheme) are implemented.
function match(selector, document) {
  if (Array.isArray(selector)) return Math.max(0, ...selector.map((s) => match(s, document)));
  if (typeof selector === "string") selector = { language: selector };
  if (selector.pattern !== undefined || selector.notebookType !== undefined) {
    throw new Error("stand-in languages.match: pattern and notebookType filters are not implemented");
  }
  const fits = (want, have) => (want === undefined || want === "*" ? 5 : want === have ? 10 : 0);
  const scores = [fits(selector.language, document.languageId), fits(selector.scheme, document.uri.scheme)];
  return Math.min(...scores) === 0 ? 0 : Math.max(...scores);
}

const diagnosticsChanged = new Emitter();
const collections = new Set();

function createDiagnosticCollection(name) {
  const entries = new Map(); // uri string -> diagnostics
  const collection = {
    name,
    set(uri, diagnostics) {
      if (Array.isArray(uri)) throw new Error("stand-in DiagnosticCollection.set([...]): not implemented");
      entries.set(uri.toString(), diagnostics ? [...diagnostics] : []);
      diagnosticsChanged.fire({ uris: [uri] });
    },
    delete(uri) {
      entries.delete(uri.toString());
      diagnosticsChanged.fire({ uris: [uri] });
    },
    clear() {
      const uris = [...entries.keys()].map(Uri.parse);
      entries.clear();
      diagnosticsChanged.fire({ uris });
    },
    get: (uri) => entries.get(uri.toString()),
    has: (uri) => entries.has(uri.toString()),
    dispose() {
      collection.clear();
      collections.delete(collection);
    },
  };
  collections.add(collection);
  return collection;
}

function getDiagnostics(uri) {
  return [...collections].flatMap((c) => c.get(uri) || []);
}

function createOutputChannel(name) {
  const write = (text) => harness.output.push(text);
  const noop = () => undefined;
  return {
    name,
    append: write,
    appendLine: (line) => write(`${line}\n`),
    replace: write,
    ...{ clear: noop, show: noop, hide: noop, dispose: noop },
  };
}

function showMessage(level) {
  return (message) => {
    harness.shown.push({ level, message });
    return Promise.resolve(undefined); // the user picked no button
  };
}

function getConfiguration(section) {
  const key = (name) => (section ? `${section}.${name}` : name);
  return {
    get: (name, fallback) => (key(name) in harness.settings ? harness.settings[key(name)] : fallback),
    has: (name) => key(name) in harness.settings,
  };
}

const events = {
  didChangeConfiguration: new Emitter(),
  didOpen: new Emitter(),
  didChange: new Emitter(),
  didClose: new Emitter(),
  didSave: new Emitter(),
  willSave: new Emitter(),
};

const workspace = {
  getConfiguration,
  openTextDocument: openUntitled,
  onDidChangeConfiguration: events.didChangeConfiguration.event,
  textDocuments: [],
  workspaceFolders: undefined,
  onDidOpenTextDocument: events.didOpen.event,
  onDidChangeTextDocument: events.didChange.event,
  onDidCloseTextDocument: events.didClose.event,
  onDidSaveTextDocument: events.didSave.event,
  onWillSaveTextDocument: events.willSave.event,
};

function register(kind) {
  return (selector, provider) => {
    const entry = { kind, selector, provider };
    harness.providers.push(entry);
    return new Disposable(() => harness.providers.splice(harness.providers.indexOf(entry), 1));
  };
}

const languages = {
  createDiagnosticCollection,
  getDiagnostics,
  onDidChangeDiagnostics: diagnosticsChanged.event,
  match,
  registerDocumentFormattingEditProvider: register("documentFormatting"),
};

// Commands as VS Code keeps them: registered by id, run by `executeCommand`.
const commands = {
  registerCommand(id, callback) {
    harness.commands[id] = callback;
    return new Disposable(() => delete harness.commands[id]);
  },
  executeCommand(id, ...args) {
    if (!(id in harness.commands)) return Promise.reject(new Error(`command '${id}' not found`));
    return Promise.resolve(harness.commands[id](...args));
  },
};

// An untitled document (`openTextDocument({language, content})`) and an editor shown for it.
async function openUntitled({ language, content }) {
  const document = new TextDocument(`/untitled-${harness.untitled.length + 1}`, language, content || "");
  harness.untitled.push(document);
  return document;
}

async function showTextDocument(document, options) {
  const editor = { document, viewColumn: options && options.viewColumn };
  harness.editors.push(editor);
  window.activeTextEditor = editor;
  return editor;
}

const window = {
  createOutputChannel,
  showTextDocument,
  showErrorMessage: showMessage("error"),
  showWarningMessage: showMessage("warning"),
  showInformationMessage: showMessage("information"),
  activeTextEditor: undefined,
};

// Serves a name the client uses but this stand-in does not implement, and records it.
function stubbed(target, where) {
  return new Proxy(target, {
    get(obj, name) {
      if (name in obj || typeof name !== "string" || name === "then") return obj[name];
      harness.stubbed.add(`${where}${name}`);
      if (/^[A-Z]/.test(name)) return class {};
      return () => new Disposable(() => undefined);
    },
  });
}

const vscode = stubbed(
  {
    version: "1.82.0", // the extension's engines.vscode minimum
    env: stubbed({ appName: "srpo-dsl stand-in (node)", language: "en" }, "env."),
    workspace: stubbed(workspace, "workspace."),
    languages: stubbed(languages, "languages."),
    window: stubbed(window, "window."),
    commands: stubbed(commands, "commands."),
    ViewColumn: { Active: -1, Beside: -2, One: 1, Two: 2 },
    ...{ Uri, Position, Range, Diagnostic, DiagnosticSeverity, TextEdit, Disposable, CodeActionKind },
    ...{ EventEmitter: Emitter, CancellationTokenSource, CancellationError },
  },
  ""
);

// What VS Code has when the user opens a folder.
function openFolder(dir) {
  workspace.workspaceFolders = [{ uri: Uri.file(dir), name: path.basename(dir), index: 0 }];
}

// What VS Code does when the user opens a file: the document joins workspace.textDocuments, then
// onDidOpenTextDocument fires.
function openTextDocument(file, languageId, text) {
  const document = new TextDocument(file, languageId, text);
  workspace.textDocuments.push(document);
  events.didOpen.fire(document);
  return document;
}

// What VS Code does when the user edits a document: its text and version change, then
// onDidChangeTextDocument fires with the change (here: the whole old text replaced by `text`).
function changeTextDocument(document, text) {
  const lines = document._text.split("\n");
  const range = new Range(0, 0, lines.length - 1, lines[lines.length - 1].length);
  const change = { range, rangeOffset: 0, rangeLength: document._text.length, text };
  document._text = text;
  document.version += 1;
  events.didChange.fire({ document, contentChanges: [change], reason: undefined });
}

module.exports = { vscode, harness, openFolder, openTextDocument, changeTextDocument };
