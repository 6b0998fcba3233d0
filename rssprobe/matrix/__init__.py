"""The run matrix: one run group per cell of torch x deepspeed x patch x allocator, resumable.

cells: the product, its index on disk (matrix.json) and each cell's figures and effects;
workflow: running the cells not yet finished, and the one table at the end.
"""
