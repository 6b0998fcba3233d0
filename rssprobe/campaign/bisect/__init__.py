"""Bisect: which version, which patch component, or which commit moved a figure.

search: binary search and ddmin over answers (no I/O); git: the `git bisect run` driver;
rounds: run groups per configuration tried, judged against the reference, resumable;
start: which bisect a command line asks for (the one entry point);
versions, components, commits: the three workflows. Every answer is a verdict's, read from
rssprobe.verdicts, in the direction the bad endpoint (or --direction) says is bad.
"""
