"""The model: torchvision's ResNet-50 trained with SGD and cross-entropy on Lightning."""

from __future__ import annotations

from typing import Any

import lightning
import torch
import torch.nn.functional as F
import torchvision

__all__ = ["ResNetClassifier"]

# ImageNet channel statistics, for images that arrive as uint8.
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


class ResNetClassifier(lightning.LightningModule):
    def __init__(self, num_classes: int, lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 1e-4,
                 arch: str = "resnet50") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
        self.register_buffer("mean", torch.tensor(_MEAN).view(1, 3, 1, 1) * 255, persistent=False)
        self.register_buffer("std", torch.tensor(_STD).view(1, 3, 1, 1) * 255, persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        # Normalising here, on the device, keeps the host-to-device copy at one byte per pixel.
        mean, std = self.get_buffer("mean"), self.get_buffer("std")
        return self.net((images.float() - mean) / std)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch["images"]), batch["labels"])
        self.log("loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hparams = self.hparams
        return torch.optim.SGD(self.parameters(), lr=hparams["lr"], momentum=hparams["momentum"],
                               weight_decay=hparams["weight_decay"])
