"""The search: select -> run -> reflect -> gate -> validate -> archive (and merge)."""
