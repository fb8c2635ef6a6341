"""This process's place among the others: the data-parallel group and its collectives (`process_group`),
the network interface the nodes reach each other through (`network`), and which prompts each step
trains on, the same on every machine (`data_order`), and how DeepSpeed is imported (`ds_import`).

It imports no other part of `rl`; every part above may import it.
"""
