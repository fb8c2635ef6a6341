"""`srpo-dsl lsp`: a Language Server for `.srpo` workflows (diagnostics, formatting, symbols,
definitions, hovers, completion). The features are functions of a document's text and path
(positions in code points, 0-based); `server` wires them to pygls and converts to the client's units."""
