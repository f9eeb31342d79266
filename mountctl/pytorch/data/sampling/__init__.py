"""Who reads which samples: the exactly-once plan over ranks and DataLoader workers (``plan``), a reader's place
in it (``epoch_position``), and the map-style batch sampler that follows it (``mapsampler``). Pure arithmetic."""
