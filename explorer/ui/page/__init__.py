"""The page's structure: the tabs and the blocks they share.

``app`` assembles the page from ``run_tab``, ``history_tab`` and ``evaluations``; ``viewblock`` (a stored-run
view with its what-if controls), ``forkblock`` (its fork menus) and ``gallery_block`` (the recorded case
studies) are reused by several tabs; ``form`` and ``controls`` build each method's inputs from its config;
``links`` opens ``?run=``, ``?compare=``, ``?case=`` on page load.
"""
