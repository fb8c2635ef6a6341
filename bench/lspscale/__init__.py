"""The editor clients bench/lsp_scale.py times the language server through (Neovim, the VS Code client)."""
