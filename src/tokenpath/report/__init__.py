"""Every rendering of the results model: the terminal's tables, Markdown and CSV (tables.py for matrix and sweep,
load_table.py for load), and `tokenpath report`'s self-contained HTML page (page.py, charts.py, compare.py)."""
