"""`tokenpath diagnose`: a short series of streams through one path, classified into the cause of what the path
does to them (series.py plans, measure.py runs, classify.py decides, fixes.py names the line that fixes it)."""
