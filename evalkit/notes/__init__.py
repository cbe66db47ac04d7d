"""Reading notes: one Markdown reader (`markdown.py`) for every part of evalkit that needs a
note's structure (headings, sections, code, Obsidian comments, front matter, links)."""
