"""What several test files share, imported as `tests.support.NAME`: running the command line and loading a
bench script (`clitools`), the training tests' team, models and episodes (`training`), the language
server's cases (`lsptools`, `lang_cases`), the viewer's runs (`viewtools`), whole training runs (`runs`), the fuzzer (`fuzzing`), the
two network namespaces of the multi-node tests (`nodes`) and a retrieval server (`retrieval_server`).
Fixtures live in tests/conftest.py; the language server's test client is bench/lsp_client.py, which
the bench scripts use too."""
