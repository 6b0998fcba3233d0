"""The evidence pages' generators (reports/*.md): Python that reads run directories through rssprobe's library.

The rule (docs/developing.md, "Evidence"): reports/ holds the pages, the archives of their runs, their inputs and
shell scripts that call the `rssprobe` command line (its --format json is the public surface); code that imports
rssprobe's internals (analysis.summary.Summary, store.rundir, ...) lives here, where `ruff check tools` and the fast
lane (tests/test_evidence.py: every module imports; reports/ holds no such import) reach it, so a refactor that
renames what it reads fails a check instead of silently breaking a page. Each runs from the checkout's root as
`python -m tools.evidence.NAME`, as its page says.
"""
