"""Campaigns: many run groups in one directory, resumable and shardable. engine (the directory, its
definition, its index, ensure(group), --shard), matrix (cartesian products), plan (a base and axes one at a
time, from TOML), scale (size sweeps), bisect/ (which version, component or commit moved a figure), merge
(shards joined into one directory)."""
