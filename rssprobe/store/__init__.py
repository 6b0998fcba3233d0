"""Storage: where things live (layout), THE damaged-file reader (reader), run and group directories
(rundir), the judgement of a run's status from its files (judgement), format versions (upgrade),
campaign indexes (campaign)."""
