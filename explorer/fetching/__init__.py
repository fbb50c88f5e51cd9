"""Benchmark files the explorer can fetch from their public homes (``explorer data list|fetch``).

:mod:`explorer.fetching.catalog` names each file, where it lives and under which licence;
:mod:`explorer.fetching.download` brings it into the fetched-data folder
(:func:`explorer.paths.fetched_data_dir`), resumable and checked against the checksum its host
states. The question loaders and corpus resolvers find fetched files through
:func:`explorer.fetching.catalog.find_file`, after the shared data folder.
"""
