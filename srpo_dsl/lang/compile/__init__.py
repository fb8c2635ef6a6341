"""Compile: a checked workflow to its event graph (`compiler`), the frozen types every later stage reads
(`graph`), the graph's text formats (`graph_formats`), and a compiled graph's tool options replaced for one
command (`settings`).

May import: `syntax`, `usercode`, `checks`.
"""
