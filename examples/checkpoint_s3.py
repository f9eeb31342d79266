#!/usr/bin/env python3
"""Save a checkpoint straight to S3 and load it back, with the S3 Connector for PyTorch.

    python examples/checkpoint_s3.py [s3://BUCKET/checkpoints/]

Without a URI it runs on the embedded local S3 (started if it is not running,
stopped again if it was started for this), with a small example dataset
written there on first use, as ``resnet.py bench`` and ``demo`` do.

No local copy is written.  The endpoint and credentials come from the
environment; ``mountctl.resolve()`` turns them into the connector's arguments.
(``resnet.py train --checkpoint-dir s3://...`` does the same through Lightning.)
"""

import json
import sys

import torch
import torchvision
from s3torchconnector import S3Checkpoint, S3ClientConfig

import mountctl
from mountctl.pytorch.fallback import example_uri


def main(uri: str) -> None:
    settings = mountctl.resolve()
    checkpoint = S3Checkpoint(region=settings.region, endpoint=settings.endpoint_url,
                              s3client_config=S3ClientConfig(force_path_style=settings.path_style))
    target = uri.rstrip("/") + "/resnet18.pt"

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()  # so that the optimizer has state worth saving
    with checkpoint.writer(target) as writer:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}, writer)

    with checkpoint.reader(target) as reader:
        state = torch.load(reader, weights_only=True)
    restored = torchvision.models.resnet18(num_classes=10)
    restored.load_state_dict(state["model"])
    pairs = zip(model.state_dict().values(), restored.state_dict().values(), strict=True)
    same = all(torch.equal(saved, loaded) for saved, loaded in pairs)
    print(json.dumps({"checkpoint": target, "tensors": len(state["model"]), "step": state["step"],
                      "identical": same}))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    # Without a URI: a small example on the embedded local S3, as `resnet.py bench` and `demo` do.
    with example_uri(sys.argv[1] if len(sys.argv) == 2 else None, "none") as chosen:
        main(chosen)
