-- srpo-dsl in Neovim 0.7 and later: the `srpo` filetype for *.srpo files, and the language server
-- `srpo-dsl lsp` started for them, one client per project root, shared by that root's buffers.
--
--   require("srpo").setup()        -- with this file as lua/srpo.lua in your config folder
--   dofile("/path/to/srpo-dsl/editors/neovim/srpo.lua").setup({
--     cmd = { "/path/to/.venv/bin/srpo-dsl", "lsp" },
--   })
--
-- Settings, all optional:
--   cmd           the server's program and arguments (default: vim.g.srpo_dsl_cmd if set, else
--                 { "srpo-dsl", "lsp" })
--   root_markers  names (files or folders) whose presence marks a project's root (default { ".git" });
--                 a file with none above it has its own folder as its root
--   on_attach     function(client, bufnr), called for each buffer the server attaches to (after
--                 the buffer's omnifunc is set to vim.lsp.omnifunc: <C-x><C-o> completes)
--   flags         the client's flags, e.g. { debounce_text_changes = 150 } (Neovim's default)
--
-- Neovim 0.8 added vim.lsp.start and made vim.filetype.add the filetype detection; 0.7 has neither
-- (its vim.filetype.add is consulted only with g:do_filetype_lua = 1), so there this file registers
-- the filetype with an autocmd and starts and reuses clients itself.

local M = {}

local NAME = "srpo-dsl"
local HAS_08 = vim.fn.has("nvim-0.8") == 1

M.config = { cmd = { "srpo-dsl", "lsp" }, root_markers = { ".git" } }

local uv = vim.uv or vim.loop -- vim.uv from 0.10
local started = {} -- Neovim 0.7: project root -> the id of the client started for it
local warned = false

-- The nearest folder at or above `path`'s folder that holds one of the root markers, else its folder.
function M.root(path)
  local dir = vim.fn.fnamemodify(path, ":p:h")
  local here = dir
  while true do
    for _, marker in ipairs(M.config.root_markers) do
      if uv.fs_stat(here .. "/" .. marker) then
        return here
      end
    end
    local parent = vim.fn.fnamemodify(here, ":h")
    if parent == here then
      return dir
    end
    here = parent
  end
end

-- The srpo-dsl clients attached to buffer `bufnr` (0: the current one).
function M.clients(bufnr)
  bufnr = bufnr ~= 0 and bufnr or vim.api.nvim_get_current_buf()
  if vim.lsp.get_clients then -- 0.10+
    return vim.lsp.get_clients({ bufnr = bufnr, name = NAME })
  end
  return vim.tbl_filter(function(client)
    return client.name == NAME
  end, vim.tbl_values(vim.lsp.buf_get_clients(bufnr)))
end

-- Format buffer `bufnr` with the server, waiting for its edit (at most `timeout_ms`, default 2000).
function M.format(bufnr, timeout_ms)
  bufnr = bufnr ~= 0 and bufnr or vim.api.nvim_get_current_buf()
  timeout_ms = timeout_ms or 2000
  if HAS_08 then
    vim.lsp.buf.format({ bufnr = bufnr, timeout_ms = timeout_ms, name = NAME })
  else
    vim.api.nvim_buf_call(bufnr, function()
      vim.lsp.buf.formatting_sync(nil, timeout_ms)
    end)
  end
end

-- Neovim 0.7: attach `bufnr` to the running client of `config.root_dir`, starting one if none runs.
local function start_07(bufnr, config)
  local id = started[config.root_dir]
  local client = id and vim.lsp.get_client_by_id(id)
  if not client or client.is_stopped() then
    id = vim.lsp.start_client(config)
    started[config.root_dir] = id
  end
  if id then
    vim.lsp.buf_attach_client(bufnr, id)
  end
end

-- Each buffer the server attaches to completes with it on <C-x><C-o> (0.7 sets no omnifunc itself),
-- then the user's on_attach runs.
local function on_attach(client, bufnr)
  vim.bo[bufnr].omnifunc = "v:lua.vim.lsp.omnifunc"
  if M.config.on_attach then
    M.config.on_attach(client, bufnr)
  end
end

-- Start the server for buffer `bufnr`, or attach it to the client already running for its root.
function M.attach(bufnr)
  local cmd = M.config.cmd
  if vim.fn.executable(cmd[1]) ~= 1 then
    if not warned then -- once a session, not once a buffer
      warned = true
      local why = "srpo-dsl: `%s` is not an executable; set the server's command: setup({ cmd = {...} })"
      vim.notify(why:format(cmd[1]), vim.log.levels.WARN)
    end
    return
  end
  local config = {
    name = NAME,
    cmd = cmd,
    root_dir = M.root(vim.api.nvim_buf_get_name(bufnr)),
    on_attach = on_attach,
    flags = M.config.flags,
  }
  if HAS_08 then
    vim.lsp.start(config, { bufnr = bufnr }) -- reuses the client of the same name and root
  else
    start_07(bufnr, config)
  end
end

-- The prompt templates the server also answers for (its diagnostics, hover, completion, definition).
local TEMPLATES = { "*.j2", "*.jinja", "*.jinja2" }

-- Make *.srpo files of the `srpo` filetype.
local function register_filetype()
  if HAS_08 then
    vim.filetype.add({ extension = { srpo = "srpo" } })
  else
    vim.api.nvim_create_autocmd({ "BufRead", "BufNewFile" }, {
      group = "srpo-dsl",
      pattern = "*.srpo",
      command = "setfiletype srpo", -- overrides only a fallback guess (e.g. `conf` for a `#` line)
    })
  end
end

-- This file's folder, when it holds syntax/srpo.vim (loaded from the checkout): put it on the
-- runtimepath, so that the `srpo` filetype gets its syntax highlighting.
local function add_runtime()
  local here = debug.getinfo(1, "S").source:match("^@(.*)[/\\][^/\\]*$")
  if here and uv.fs_stat(here .. "/syntax/srpo.vim") then
    local paths = vim.opt.runtimepath:get()
    if not vim.tbl_contains(paths, here) then
      vim.opt.runtimepath:append(here)
    end
  end
end

function M.setup(opts)
  M.config = vim.tbl_extend("force", M.config, { cmd = vim.g.srpo_dsl_cmd }, opts or {})
  add_runtime()
  vim.api.nvim_create_augroup("srpo-dsl", { clear = true })
  register_filetype()
  vim.api.nvim_create_autocmd("FileType", {
    group = "srpo-dsl",
    pattern = "srpo",
    callback = function(args)
      vim.bo[args.buf].commentstring = "# %s"
      M.attach(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd({ "BufRead", "BufNewFile" }, { -- prompt templates, whatever their filetype
    group = "srpo-dsl",
    pattern = TEMPLATES,
    callback = function(args)
      M.attach(args.buf)
    end,
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do -- the .srpo buffers opened before setup
    local loaded = vim.api.nvim_buf_is_loaded(bufnr)
    if loaded and vim.bo[bufnr].filetype == "srpo" then
      M.attach(bufnr)
    elseif loaded and vim.api.nvim_buf_get_name(bufnr):match("%.srpo$") then
      vim.bo[bufnr].filetype = "srpo" -- its FileType event attaches it
    end
  end
  return M
end

return M
