"""The candidate and how it runs: the library (router text + specialist slots), the routed program that
executes it (router -> sandboxed specialist or the frozen fallback), execution profiles, and the one
scoring function (a program run on one example plus its metric)."""
