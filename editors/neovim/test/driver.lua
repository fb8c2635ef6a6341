-- Neovim, headless, driven through a scripted job: the editor side of tests/editors/test_neovim.py and of
-- bench/lsp_bench.py's real-client latency.
--
--   SRPO_NVIM_DRIVER=job.json nvim --headless --clean -n -u editors/neovim/test/driver.lua
--
-- This file is the init file: it loads the job's plugin (editors/neovim/srpo.lua) and calls its
-- setup with the job's server command, as a user's init.lua would. Once Neovim has started it runs
-- the job's scenario, writes a JSON report to the job's `out` and quits. A step that fails or times
-- out ends the scenario with the report's `failure` set. Scenarios (`job.scenario`):
--   session   open `broken` (the server attaches, its diagnostics arrive), hover at `hover`
--             ({line, character}, 0-based) by request and by vim.lsp.buf.hover()'s window, open
--             `messy` (the same client attaches) and format it
--   missing   open `file` with a server command that is not an executable
--   highlight open `file` and wait for the server: its syntax, its omnifunc, and at each of
--             `positions` ({line, col}, 1-based) the syntax group and the standard one it links to;
--             then type `o<C-x><C-o>` on its last line: the words of the completion menu it opens
--   template  open the template `file`: the server attaches, and its diagnostics arrive
--   latency   per file of `paths`: `edits` edits after a pause of `pause_ms` each, then `edits`
--             edits back to back; each one's milliseconds from nvim_buf_set_lines to the
--             diagnostics published for that version having been handed to vim.diagnostic
--   scale     per file of `paths`: `times` edits back to back, each one's milliseconds to its
--             diagnostics (as `latency`), then per entry of `requests[file name]` ({label, method,
--             params}; the params' textDocument.uri set to the buffer's) `times` vim.lsp.buf_request_sync
--             calls, each one's milliseconds (bench/lsp_scale.py)

local uv = vim.uv or vim.loop
local job = vim.fn.json_decode(table.concat(vim.fn.readfile(os.getenv("SRPO_NVIM_DRIVER")), "\n"))
local version = vim.version()
local report = {
  nvim = string.format("%d.%d.%d", version.major, version.minor, version.patch),
  notified = {},
}

vim.notify = function(message, level) -- kept for the report (a headless Neovim shows nothing)
  table.insert(report.notified, { message = message, level = level })
end

local srpo = dofile(job.plugin).setup({ cmd = job.cmd })

-- When each buffer's last diagnostics were handed to vim.diagnostic, and for which version.
local arrived = {}
local publish = vim.lsp.handlers["textDocument/publishDiagnostics"]
vim.lsp.handlers["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
  publish(err, result, ctx, config)
  arrived[vim.uri_to_bufnr(result.uri)] = { version = result.version, at = uv.hrtime() }
end

local function wait_for(what, ms, ready)
  if not vim.wait(ms, ready, 5) then
    error("timed out after " .. ms .. " ms waiting for " .. what, 0)
  end
end

local function open(path)
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  return vim.api.nvim_get_current_buf()
end

local function attached(bufnr)
  wait_for("the client to attach to " .. vim.api.nvim_buf_get_name(bufnr), 15000, function()
    return #srpo.clients(bufnr) > 0
  end)
  return srpo.clients(bufnr)[1]
end

-- The buffer's diagnostics as `srpo-dsl validate --format json` numbers them (1-based).
local function diagnostics(bufnr)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(out, {
      code = d.code,
      line = d.lnum + 1,
      col = d.col + 1,
      message = d.message,
      severity = vim.diagnostic.severity[d.severity],
      source = d.source,
    })
  end
  table.sort(out, function(a, b)
    return a.line < b.line or (a.line == b.line and a.col < b.col)
  end)
  return out
end

-- The hover's markdown as the server sent it, and the lines of the window vim.lsp.buf.hover() opens.
local function hover(bufnr, at)
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) }, position = at }
  local replies = vim.lsp.buf_request_sync(bufnr, "textDocument/hover", params, 5000) or {}
  local _, reply = next(replies)
  local text = reply and reply.result and reply.result.contents.value
  vim.api.nvim_win_set_cursor(0, { at.line + 1, at.character })
  vim.lsp.buf.hover()
  local float
  wait_for("the hover window", 5000, function()
    for _, win in ipairs(vim.api.nvim_list_wins()) do
      if vim.api.nvim_win_get_config(win).relative ~= "" then
        float = win
      end
    end
    return float ~= nil
  end)
  local shown = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(float), 0, -1, false)
  vim.api.nvim_win_close(float, true)
  return text, table.concat(shown, "\n")
end

local scenarios = {}

function scenarios.session()
  local broken = open(job.broken)
  report.filetype = vim.bo[broken].filetype
  local client = attached(broken)
  report.cmd, report.root = client.config.cmd, client.config.root_dir
  wait_for("diagnostics", 20000, function()
    return #vim.diagnostic.get(broken) > 0
  end)
  report.diagnostics = diagnostics(broken)
  report.hover, report.hover_window = hover(broken, job.hover)
  local messy = open(job.messy)
  report.same_client = attached(messy).id == client.id
  srpo.format(messy, 10000)
  local lines = vim.api.nvim_buf_get_lines(messy, 0, -1, false)
  report.formatted = table.concat(lines, "\n") .. "\n"
end

function scenarios.missing()
  local bufnr = open(job.file)
  vim.wait(500)
  report.filetype = vim.bo[bufnr].filetype
  report.clients = #srpo.clients(bufnr)
end

function scenarios.highlight()
  local bufnr = open(job.file)
  attached(bufnr)
  report.filetype, report.syntax = vim.bo[bufnr].filetype, vim.b[bufnr].current_syntax
  report.omnifunc = vim.bo[bufnr].omnifunc
  report.groups = {}
  for _, at in ipairs(job.positions) do
    local id = vim.fn.synID(at[1], at[2], 1)
    local name, linked = vim.fn.synIDattr(id, "name"), vim.fn.synIDattr(vim.fn.synIDtrans(id), "name")
    table.insert(report.groups, { name, linked })
  end
  vim.api.nvim_create_autocmd("CompleteChanged", {
    callback = function()
      report.completed = vim.tbl_map(function(item)
        return item.word
      end, vim.fn.complete_info({ "items" }).items)
    end,
  })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("Go<C-x><C-o>", true, false, true), "n", false)
  return function() -- typed keys run once this returns to the main loop; the menu opens later
    return report.completed ~= nil, "the completion menu"
  end
end

-- Milliseconds from each of `edits` edits (after `pause_ms` each) to its diagnostics; an edit sets
-- the line after the file's own (the first inserts it) to a comment.
local function edit_times(bufnr, line, edits, pause_ms, first)
  local times = {}
  for k = 1, edits do
    vim.wait(pause_ms)
    local start = uv.hrtime()
    local upto = (first and k == 1) and line or line + 1
    vim.api.nvim_buf_set_lines(bufnr, line, upto, false, { "# edit " .. k })
    local tick = vim.api.nvim_buf_get_changedtick(bufnr)
    wait_for("the diagnostics of edit " .. k, 15000, function()
      return arrived[bufnr] ~= nil and arrived[bufnr].version == tick
    end)
    times[k] = (arrived[bufnr].at - start) / 1e6
  end
  return times
end

function scenarios.template()
  local bufnr = open(job.file)
  attached(bufnr)
  wait_for("diagnostics", 20000, function()
    return #vim.diagnostic.get(bufnr) > 0
  end)
  report.diagnostics = diagnostics(bufnr)
end

function scenarios.latency()
  report.latency = {}
  for _, path in ipairs(job.paths) do
    local bufnr = open(path)
    attached(bufnr)
    wait_for("the diagnostics of " .. path, 20000, function()
      return arrived[bufnr] ~= nil
    end)
    local n = vim.api.nvim_buf_line_count(bufnr)
    report.latency[vim.fn.fnamemodify(path, ":t")] = {
      pause = edit_times(bufnr, n, job.edits, job.pause_ms, true),
      typing = edit_times(bufnr, n, job.edits, 0, false),
    }
    vim.cmd("bwipeout! " .. bufnr) -- closes it in the server too
  end
end

-- Milliseconds of each of `times` vim.lsp.buf_request_sync calls of `request` on `bufnr`.
local function request_times(bufnr, request, times)
  local params = vim.deepcopy(request.params)
  params.textDocument.uri = vim.uri_from_bufnr(bufnr)
  local out = {}
  for k = 1, times do
    local start = uv.hrtime()
    local replies, why = vim.lsp.buf_request_sync(bufnr, request.method, params, 60000)
    out[k] = (uv.hrtime() - start) / 1e6
    local _, reply = next(replies or {})
    if not reply or reply.err then
      error(request.method .. ": " .. vim.inspect(reply and reply.err or why or "no reply"), 0)
    end
  end
  return out
end

function scenarios.scale()
  report.scale = {}
  for _, path in ipairs(job.paths) do
    local bufnr = open(path)
    attached(bufnr)
    wait_for("the diagnostics of " .. path, 60000, function()
      return arrived[bufnr] ~= nil
    end)
    local times = { diagnostics = edit_times(bufnr, vim.api.nvim_buf_line_count(bufnr), job.times, 0, true) }
    local name = vim.fn.fnamemodify(path, ":t")
    for _, request in ipairs(job.requests[name]) do
      times[request.label] = request_times(bufnr, request, job.times)
    end
    report.scale[name] = times
    vim.cmd("bwipeout! " .. bufnr)
  end
end

local function finish()
  report.debounce_ms = (srpo.config.flags or {}).debounce_text_changes or 150
  vim.fn.writefile({ vim.fn.json_encode(report) }, job.out)
  vim.cmd("qa!")
end

-- A scenario that returns a function is done when it returns true, polled from the main loop (at
-- most 10 s); its second value names what it waits for.
local function poll(pending, deadline)
  local done, what = pending()
  if done or uv.now() > deadline then
    report.failure = not done and ("timed out waiting for " .. what) or nil
    return finish()
  end
  vim.defer_fn(function()
    poll(pending, deadline)
  end, 20)
end

local function main()
  local ok, pending = xpcall(scenarios[job.scenario], debug.traceback)
  report.failure = not ok and pending or nil
  if ok and type(pending) == "function" then
    return poll(pending, uv.now() + 10000)
  end
  finish()
end

vim.api.nvim_create_autocmd("VimEnter", {
  once = true,
  callback = function()
    vim.schedule(main)
  end,
})
