"""Models written in plain PyTorch for the torch frontend's tests and bench/torch_compile.py:
ResNet-18 and MobileNetV2 as torchvision defines them (written out: torchvision is not
installed with the pinned torch), a small LSTM tagger, an MLP, and a Hugging Face BertModel
built from a small BertConfig with random weights (nothing is downloaded).

Each maker returns (module in eval mode, example inputs); `size` scales the input so tests
stay fast while benchmarks use the real resolution. Imports torch: callers skip without it."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> None:
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        layers: list[nn.Module] = [] if expand == 1 else [ConvBNReLU6(cin, hidden, 1)]
        layers += [ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        cin = _divisible(32 * width)
        last = _divisible(1280 * max(1.0, width))
        features: list[nn.Module] = [ConvBNReLU6(3, cin, stride=2)]
        for t, c, n, s in self.SETTINGS:
            cout = _divisible(c * width)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU6(cin, last, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class LSTMTagger(nn.Module):
    """Token ids -> per-token tag log-probabilities through a two-layer bidirectional LSTM."""

    def __init__(self, vocab: int = 100, embed: int = 32, hidden: int = 48, tags: int = 10) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states, _ = self.lstm(self.embedding(tokens))
        return torch.log_softmax(self.head(states), dim=-1)


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (64, 256, 256, 10)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:], strict=False))
        self.norm = nn.LayerNorm(sizes[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(torch.relu(self.layers[0](x)))
        for layer in self.layers[1:-1]:
            x = nn.functional.gelu(layer(x))
        return torch.softmax(self.layers[-1](x), dim=-1)


def _seeded(seed: int = 0) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _randomize_norms(module: nn.Module) -> nn.Module:
    """Batch-norm statistics and affine parameters away from their 0/1 defaults, so that
    folding them is exercised."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return module


def resnet18(size: int = 64, batch: int = 1) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    gen = _seeded()
    model = _randomize_norms(ResNet18()).eval()
    return model, (torch.randn(batch, 3, size, size, generator=gen),)


def mobilenet_v2(size: int = 64, width: float = 0.5, batch: int = 1) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    gen = _seeded()
    model = _randomize_norms(MobileNetV2(width)).eval()
    return model, (torch.randn(batch, 3, size, size, generator=gen),)


def lstm_tagger(length: int = 12, batch: int = 2) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    gen = _seeded()
    model = LSTMTagger().eval()
    return model, (torch.randint(0, 100, (batch, length), generator=gen),)


def mlp(batch: int = 4) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    gen = _seeded()
    model = MLP().eval()
    return model, (torch.randn(batch, 64, generator=gen),)


def bert(length: int = 16, batch: int = 2, layers: int = 2, hidden: int = 64, attention: str = "sdpa"
         ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' BertModel from a small config, random weights; attention "sdpa" (the
    default: torch's scaled_dot_product_attention, decomposed at export) or "eager"."""
    from transformers import BertConfig, BertModel

    gen = _seeded()
    config = BertConfig(vocab_size=200, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=4 * hidden, max_position_embeddings=64, attn_implementation=attention)
    model = BertModel(config).eval()
    ids = torch.randint(0, 200, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[0, length - 3:] = 0
    return model, (ids, mask)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "lstm_tagger": lstm_tagger, "mlp": mlp, "bert": bert,
}
