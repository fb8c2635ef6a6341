"""`srpo-dsl view`: a run's event traces, event graph and training curves as one offline HTML page."""
