"""JPEG decoding: the one decode call (``jpeg``), on the CPU or a CUDA device, and batches decoded on the
accelerator after the DataLoader workers shipped their bytes (``device_decode``)."""
