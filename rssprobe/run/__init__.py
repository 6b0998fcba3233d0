"""Running: one worker per run (launch), with the environment it gets (environment), a group of N fresh
runs (group), the lifeline (lifeline), the node's summed RSS (nodewatch), stale build locks (opcache), ccache
behind op builds (compilecache), progress bars (progress), refusals before anything starts (preflight),
facts about this machine (host), and launches rssprobe does not control (multinode)."""
