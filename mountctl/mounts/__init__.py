"""The mount lifecycle: a spec, one backend per mount program, the supervisor, health and recovery, teardown.

``spec`` says what to mount; ``backends`` turns it into one program's command line; ``mount`` starts, watches
(``watchdog``, ``health``, ``probe``, ``progress``) and stops it (``fusectl``, ``mounttable``); ``cache``,
``warm`` and ``scratch`` own its disk; ``resilient``, ``object_version`` and ``object_list`` are how readers see
its files. The public names are re-exported by ``mountctl`` itself.
"""
