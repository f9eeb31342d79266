"""Read-ahead, in one home: every layer that reads ahead of a reader, and the one policy that chooses among them.

``policy.choose_read_ahead`` decides a run's read-ahead from the node, the dataset and the request; the layers are
each reader's next shards into memory (``next_shards``, sized by the node's ``budget``), the plan's warmer into the
mount's cache (``cache_warmer``), and a standard sampler's next files (``sampler``, ``ReadAheadSampler``). The
mount's own warm stays in the core (``mountctl.mounts.warm``), which never imports this side.
"""
