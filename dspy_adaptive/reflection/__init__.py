"""Two-stage reflection: select one action and its target, then perform that edit (paper Table 6)."""
