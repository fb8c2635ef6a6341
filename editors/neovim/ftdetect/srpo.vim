" srpo-dsl workflows: *.srpo files are of the `srpo` filetype (Vim, and Neovim with this folder on
" 'runtimepath' before `filetype on`; editors/neovim/srpo.lua's setup registers it too).
autocmd BufRead,BufNewFile *.srpo setfiletype srpo
