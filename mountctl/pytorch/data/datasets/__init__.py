"""What a DataLoader iterates: shard parsing and batching (``shards``), the iterable ``ShardDataset`` and its
persistent-worker follower, the map-style dataset, the Lightning data modules, the torchdata.nodes source, and
the modules its workers import before they fork."""
