"""A dataset's description: where it is, its index (the manifest) and the tar walks that build it.

``location`` parses the data URI once, ``manifest`` is the one description of a dataset that ``make`` writes and
``index`` finds (``indexer``, ``tarwalk``, ``tarindex``, with webdataset's member rule in ``tarsamples``), and
``index_mount`` turns it into the exact list of objects a mount serves.
"""
