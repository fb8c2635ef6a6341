"""Checks: a parsed workflow checked and resolved into `Checked`, every problem a diagnostic.

The checker (`checker`) and its passes (`declaration_checks`, `flow_checks`, with `env_checks`,
`option_checks`, `branches`, `state_keys`, `templates`, `chattemplate`, `toolformat`), the context they
share (`check_context`), the resolved declarations they build (`declarations`), and what the language
accepts beyond its grammar: the binding kinds and option blocks (`schema`).

May import: `syntax`, `usercode`.
"""
