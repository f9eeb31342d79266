"""The embedded S3 store and the far-store proxy: instruments for the demo, the tests and the benchmarks.

``server`` runs SeaweedFS on 127.0.0.1 (``identities``, ``owners``, ``security`` and ``ports`` each take one of
its jobs); ``far_proxy`` puts nginx with S3's latency and per-connection rate in front of any store; ``orphans``
stops either when its owner is gone. None of it is needed to mount a real S3 bucket.
"""
