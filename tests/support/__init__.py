"""What several test files (and the bench scripts) share, imported as `tests.support.NAME`, never from a
test file or tests/conftest.py (tests/project/test_layout.py checks it): running the command line and
loading a bench script (`clitools`), the training tests' teams, models and episodes (`training`), two LoRA
adapters on one base (`adapters`), hand-built events (`episodes`), the objective's random batches and
plugin (`objective`), sampling statistics (`sampling`), tool calls through chat templates (`tools`),
workflows calling user code (`user_code`), the language server's cases (`lsptools`, `lang_cases`),
hypothesis strategies over the language (`strategies`), README and docs readers (`markdown`), the viewer's
runs (`viewtools`), whole training runs (`runs`), the fuzzer (`fuzzing`) and its targets (`fuzz_targets`),
the two network namespaces of the multi-node tests (`nodes`), a retrieval server (`retrieval_server`), the
package's modules read with `ast` (`package_ast`) and counting compiles (`compiles`). Fixtures live in
tests/conftest.py; the language server's test client is bench/lsp_client.py, which the bench scripts use
too."""
