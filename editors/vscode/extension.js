// The srpo-dsl extension: starts the language server (`srpo-dsl lsp` by default) over stdio for
// *.srpo files. Syntax highlighting comes from syntaxes/srpo.tmLanguage.json (package.json).
// Settings (package.json): `srpo.server.command`, the server's command and arguments, to which the
// language client appends `--stdio` (TransportKind.stdio); `srpo.trace.server`, read by the
// language client itself (its id is "srpo"). test/client.js runs this file under node.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function serverCommand() {
  const configured = vscode.workspace.getConfiguration("srpo").get("server.command");
  const command = Array.isArray(configured) && configured.length > 0 ? configured : ["srpo-dsl", "lsp"];
  return { command: String(command[0]), args: command.slice(1).map(String) };
}

async function activate(context) {
  const { command, args } = serverCommand();
  const serverOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions = {
    documentSelector: [{ language: "srpo" }, { language: "jinja" }], // workflows and prompt templates
    outputChannelName: "srpo-dsl",
  };
  client = new LanguageClient("srpo", "srpo-dsl language server", serverOptions, clientOptions);
  try {
    await client.start();
  } catch (err) {
    client = undefined;
    const shown = [command, ...args, "--stdio"].join(" ");
    vscode.window.showErrorMessage(
      `srpo-dsl: could not start the language server \`${shown}\` (${err && err.message ? err.message : err}; ` +
        "its output is in the srpo-dsl output channel). " +
        "Install srpo-dsl (`pip install .` in its repository), or set `srpo.server.command` to the command " +
        '(e.g. ["/path/to/.venv/bin/srpo-dsl", "lsp"]). Highlighting works without it.'
    );
    return;
  }
  context.subscriptions.push({ dispose: () => client && client.stop() });
  context.subscriptions.push(vscode.commands.registerCommand("srpo.showCompiledGraph", showCompiledGraph));
}

// "srpo-dsl: Show the compiled graph": the active workflow's event graph as Mermaid (the server's
// `srpo.showGraph` command, as `srpo-dsl compile --emit mermaid` prints it), in an editor beside it.
async function showCompiledGraph() {
  const editor = vscode.window.activeTextEditor;
  if (!client || !editor || editor.document.languageId !== "srpo") {
    vscode.window.showInformationMessage("srpo-dsl: open a .srpo workflow to show its compiled graph.");
    return undefined;
  }
  const uri = editor.document.uri.toString();
  const graph = await client.sendRequest("workspace/executeCommand", { command: "srpo.showGraph", arguments: [uri] });
  if (!graph) {
    vscode.window.showWarningMessage("srpo-dsl: the workflow does not compile; its errors are in the Problems view.");
    return undefined;
  }
  const document = await vscode.workspace.openTextDocument({ language: "mermaid", content: graph });
  await vscode.window.showTextDocument(document, { viewColumn: vscode.ViewColumn.Beside, preview: true });
  return document;
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
