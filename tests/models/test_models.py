"""Models: shapes of features/head/forward, deterministic init, weight files, devices."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torchvision import models as tvm
from torchvision.models.vision_transformer import VisionTransformer

from fedcore.config import ModelConfig
from fedcore.errors import ArtifactError, ConfigError
from fedcore.models import FedModel, available_models, build_model, resolve_device
from fedcore.models.vit import FedViT

# (name, in_shape, params) at the input size each model is meant for; batch 2 keeps it cheap.
CASES = [
    ("mlp", (1, 8, 8), {}),
    ("cnn", (1, 8, 8), {}),
    ("cnn", (3, 16, 16), {"norm": "batch"}),
    ("cnn", (1, 28, 28), {"norm": "none"}),
    ("resnet18_cifar", (3, 32, 32), {}),
    ("resnet34_cifar", (3, 32, 32), {"norm": "group"}),
    ("resnet18", (1, 32, 32), {}),
    ("resnet50", (3, 32, 32), {}),
]


def _build(name: str, shape: tuple[int, int, int], seed: int = 0, classes: int = 7, **kw) -> FedModel:
    return build_model(ModelConfig(name=name, width=16, **kw), shape, classes, seed=seed)


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(("name", "shape", "params"), CASES)
def test_forward_is_head_of_features(name, shape, params):
    model = _build(name, shape, params=params).eval()
    x = torch.rand(2, *shape, generator=torch.Generator().manual_seed(0))

    with torch.no_grad():
        z, logits = model.features(x), model(x)

    assert z.shape == (2, model.feature_dim)
    assert logits.shape == (2, 7)
    assert torch.allclose(model.head(z), logits)
    own = model.state_dict()
    head = [k for k in own if k.startswith(model.head_keys())]
    assert {tuple(own[k].shape) for k in head} == {(7, model.feature_dim), (7,)}


def test_every_registered_model_is_covered():
    assert {c[0] for c in CASES} | {"vit_b_16"} == set(available_models())


def test_vit_features_head_and_position_interpolation():
    model = build_model(ModelConfig(name="vit_b_16"), (3, 32, 32), 5, seed=0).eval()
    x = torch.rand(1, 3, 32, 32)

    with torch.no_grad():
        z, logits = model.features(x), model(x)
    # An ImageNet file has 14x14 + 1 positions; this model has 2x2 + 1.
    sd = model.adapt_state_dict({"encoder.pos_embedding": torch.randn(1, 197, 768)})

    assert z.shape == (1, 768) and logits.shape == (1, 5)
    assert torch.allclose(model.head(z), logits)
    assert model.head_keys() == ("heads.",)
    assert sd["encoder.pos_embedding"].shape == (1, 5, 768)


def test_wrappers_keep_torchvision_keys_and_outputs():
    # A tiny ViT runs the same wrapper code as ViT-B/16 at a fraction of the cost.
    tiny = VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=8)
    wrapped = FedViT(tiny).eval()
    x = torch.rand(2, 3, 32, 32)

    with torch.no_grad():
        same = torch.allclose(wrapped(x), tiny.eval()(x))

    assert same
    assert list(wrapped.state_dict()) == list(tiny.state_dict())
    assert list(_build("resnet18", (3, 32, 32)).state_dict()) == list(tvm.resnet18().state_dict())


def test_torchvision_imagenet_checkpoint_loads_with_new_head(tmp_path: Path):
    imagenet = tvm.resnet18(weights=None)  # stands in for a downloaded 1000-class file
    path = tmp_path / "resnet18.pt"
    torch.save(imagenet.state_dict(), path)

    model = _build("resnet18", (3, 32, 32), classes=10, weights=str(path))

    assert torch.equal(model.layer3[0].conv1.weight, imagenet.layer3[0].conv1.weight)
    assert model.fc.weight.shape == (10, 512)


def test_vit_rejects_sizes_it_cannot_patchify():
    with pytest.raises(ConfigError, match="multiple of 16"):
        build_model(ModelConfig(name="vit_b_16"), (3, 28, 28), 10)


def test_same_seed_same_init_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.get_rng_state()

    a, b = _build("cnn", (1, 8, 8), seed=3), _build("cnn", (1, 8, 8), seed=3)
    c = _build("cnn", (1, 8, 8), seed=4)

    assert _same_params(a, b)
    assert not _same_params(a, c)
    assert torch.equal(torch.get_rng_state(), before)


def test_unknown_model_and_unknown_params_are_config_errors():
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        _build("nope", (1, 8, 8))
    with pytest.raises(ConfigError, match="no params"):
        _build("mlp", (1, 8, 8), params={"depth": 3})
    with pytest.raises(ConfigError, match="params.norm"):
        _build("cnn", (1, 8, 8), params={"norm": "layer"})


def test_local_weights_round_trip(tmp_path: Path):
    src = _build("cnn", (1, 8, 8), seed=1)
    path = tmp_path / "w.pt"
    torch.save(src.state_dict(), path)

    dst = _build("cnn", (1, 8, 8), seed=2, weights=str(path))

    assert _same_params(src, dst)


def test_head_with_other_class_count_is_reinitialized(tmp_path: Path):
    src = _build("resnet18_cifar", (3, 32, 32), seed=1, classes=10)
    path = tmp_path / "w.pt"
    torch.save({"module." + k: v for k, v in src.state_dict().items()}, path)  # DataParallel-style keys
    fresh = _build("resnet18_cifar", (3, 32, 32), seed=2, classes=4)

    dst = _build("resnet18_cifar", (3, 32, 32), seed=2, classes=4, weights=str(path))

    assert torch.equal(dst.layer4[1].bn2.running_var, src.layer4[1].bn2.running_var)
    assert torch.equal(dst.conv1.weight, src.conv1.weight)
    assert torch.equal(dst.fc.weight, fresh.fc.weight)


def test_three_channel_weights_fit_a_grey_model(tmp_path: Path):
    src = _build("resnet18", (3, 32, 32), seed=1)
    path = tmp_path / "w.pt"
    torch.save(src.state_dict(), path)

    dst = _build("resnet18", (1, 32, 32), seed=2, weights=str(path))

    # Summing over RGB keeps a grey image replicated on 3 channels at the same response.
    assert torch.allclose(dst.conv1.weight, src.conv1.weight.sum(dim=1, keepdim=True))


def test_s3_weights_go_through_storage_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    src = _build("mlp", (1, 8, 8), seed=1)
    torch.save(src.state_dict(), tmp_path / "w.pt")
    calls = []

    def download_file(uri: str, local_path: str) -> None:
        calls.append(uri)
        shutil.copy(tmp_path / "w.pt", local_path)

    monkeypatch.setattr("fedcore.models.weights.download_file", download_file)

    dst = _build("mlp", (1, 8, 8), seed=2, weights="s3://bucket/models/w.pt")

    assert calls == ["s3://bucket/models/w.pt"]
    assert _same_params(src, dst)


def test_corrupt_file_is_artifact_error(tmp_path: Path):
    path = tmp_path / "w.pt"
    path.write_bytes(b"definitely not a zip archive")

    with pytest.raises(ArtifactError, match="unreadable"):
        _build("mlp", (1, 8, 8), weights=str(path))
    with pytest.raises(ArtifactError, match="not found"):
        _build("mlp", (1, 8, 8), weights=str(tmp_path / "absent.pt"))


def test_weights_of_another_model_are_artifact_error(tmp_path: Path):
    path = tmp_path / "w.pt"
    torch.save(_build("mlp", (1, 8, 8)).state_dict(), path)

    with pytest.raises(ArtifactError, match=r"does not fit model 'cnn' \(missing: backbone\.0\.0\.weight"):
        _build("cnn", (1, 8, 8), weights=str(path))


def test_wrong_backbone_shape_is_artifact_error(tmp_path: Path):
    path = tmp_path / "w.pt"
    torch.save(_build("mlp", (1, 8, 8)).state_dict(), path)

    expected = r"wrong shape: backbone\.1\.weight \(16, 64\) \(model \(16, 16\)\)"
    with pytest.raises(ArtifactError, match=expected):
        _build("mlp", (1, 4, 4), weights=str(path))


def test_resolve_device(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        resolve_device("tpu")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_device("cuda:1")


def test_seeded_init_is_a_pure_function_of_the_seed_and_leaves_the_global_rng_alone():
    from torch import nn

    from fedcore.models.base import seeded_init

    before = torch.random.get_rng_state()
    with seeded_init(3):
        a = nn.Linear(4, 4).weight.detach().clone()
    with seeded_init(3):
        b = nn.Linear(4, 4).weight.detach().clone()
    with seeded_init(4):
        c = nn.Linear(4, 4).weight.detach().clone()
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(torch.random.get_rng_state(), before)
