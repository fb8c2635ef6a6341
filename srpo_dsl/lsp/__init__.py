"""`srpo-dsl lsp`: a Language Server for `.srpo` workflows (diagnostics, formatting, symbols,
definitions, hovers, completion). The features are functions of a document's text, path and last
good analysis (`view`; positions in code points, 0-based); `server` wires them to pygls, analyses a
burst of edits once (`documents`) and converts positions to the client's units (`units`)."""
