"""Data movement: Transpose/Concat/Split/Slice/Pad copies, layouts, Gather/TopK-style indexing, Resize."""
