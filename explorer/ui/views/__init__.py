"""Rendering traces: what the page, the report and the exports show, read from traces alone.

``view`` is a read-only index over one trace; ``render`` composes the panels (``explorer.ui.panels``) into
the view of one run, runs side by side or a live run; ``html`` escapes and embeds charts; ``report`` writes
the exports; ``case_stories`` captions the recorded case studies.
"""
