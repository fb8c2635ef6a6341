"""The user's Python, as a workflow names it (`"file.py:function"`): found and read with `ast`, never
imported, never run (`pysource`, `pycode`), a tool function's JSON schema (`toolschema`), and the state of
each file a check read, for caches that hold while the files are unchanged (`filestate`).

May import: `syntax`.
"""
