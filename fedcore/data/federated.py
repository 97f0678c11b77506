"""The FederatedDataset artifact: tensors, client index arrays, labels, test split, metadata.

Saved as a versioned directory:

    data.pt        x_train, working labels, x_test, y_test, client indices (no ground truth), and
                   with data.validation the held-out set: x_val, y_val (noisy), val_owner,
                   x_server, y_server (the clean server set, when asked for)
    truth.pt       y_true, noise flags, per-client rates (only metrics read this)
    scene.json     the human-readable noise-scene report
    manifest.json  format version, fedcore version, config hash, meta, sha256 of every file,
                   and `manifest_sha256`: the sha256 of the manifest itself (all other fields)

`load` verifies every checksum, the manifest's own included (so an edit of `meta`, such as
num_classes or the normalization mean, is caught as corruption), and refuses a tampered or
truncated artifact. Methods get a `FederatedView`, which carries no ground truth at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedcore
from fedcore.data.premise import premise_check
from fedcore.data.summary import federation_summary
from fedcore.data.validation import ValidationSet
from fedcore.errors import ArtifactError, GroundTruthAccessError
from fedcore.io import publish_dir, sha256_file, stage_prefix

FORMAT_VERSION = 2  # 2: the manifest carries its own sha256
FILES = ("data.pt", "truth.pt", "scene.json")
SELF_DIGEST = "manifest_sha256"


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 of a manifest's canonical JSON, leaving out the digest field itself."""
    body = {k: v for k, v in manifest.items() if k != SELF_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class GroundTruth:
    """What only metrics may read. Arrays over training samples (N,) or clients (K,)."""

    y_true: np.ndarray
    is_noisy_sample: np.ndarray
    is_noisy_client: np.ndarray
    noise_type: list[str]
    target_rate: np.ndarray
    realized_rate: np.ndarray
    y_true_known: np.ndarray | None = None


@dataclass
class FederatedDataset:
    x_train: torch.Tensor  # uint8 (N, C, H, W)
    y_train: torch.Tensor  # working (possibly noisy) labels: int64 (N,) or uint8 (N, C)
    x_test: torch.Tensor
    y_test: torch.Tensor
    client_indices: list[np.ndarray]
    truth: GroundTruth
    meta: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)
    val: ValidationSet | None = None  # held out of x_train; only the evaluator reads it

    # -- convenience ---------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def task(self) -> str:
        return str(self.meta["task"])

    def view(self) -> FederatedView:
        """The method-facing view: inputs and working labels only."""
        return FederatedView(self)

    # -- persistence -----------------------------------------------------------------------
    def save(self, out: str | Path) -> Path:
        """Write the artifact atomically (temp dir, then rename); returns the directory."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            torch.save(
                {"x_train": self.x_train, "y_train": self.y_train, "x_test": self.x_test, "y_test": self.y_test,
                 "client_indices": [torch.from_numpy(np.asarray(p, dtype=np.int64)) for p in self.client_indices],
                 **_val_to_tensors(self.val)},
                tmp / "data.pt",
            )
            torch.save(_truth_to_tensors(self.truth), tmp / "truth.pt")
            (tmp / "scene.json").write_text(json.dumps(scene_report(self), indent=2))
            self.manifest = {
                "format_version": FORMAT_VERSION,
                "fedcore_version": fedcore.__version__,
                "config_hash": self.meta.get("config_hash"),
                "data_hash": self.meta.get("data_hash"),
                "meta": self.meta,
                "files": {name: sha256_file(tmp / name) for name in FILES},
            }
            # JSON round trip first: the digest must be of what load() will read back.
            self.manifest = json.loads(json.dumps(self.manifest))
            self.manifest[SELF_DIGEST] = manifest_digest(self.manifest)
            (tmp / "manifest.json").write_text(json.dumps(self.manifest, indent=2, sort_keys=True))
            publish_dir(tmp)
            _replace_dir(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return out

    @property
    def sha256(self) -> str:
        """Checksum of the data file: identifies the artifact in tracking params."""
        return str(self.manifest.get("files", {}).get("data.pt", ""))

    @classmethod
    def load(cls, path: str | Path) -> FederatedDataset:
        """Load and verify an artifact directory (or s3:// prefix)."""
        path = _local_artifact_dir(str(path))
        manifest = _read_manifest(path)
        for name, digest in manifest["files"].items():
            f = path / name
            if not f.is_file():
                raise ArtifactError(f"artifact '{path}' is missing {name}; re-create it with `fedcore data prepare`")
            actual = sha256_file(f)
            if actual != digest:
                raise ArtifactError(
                    f"artifact '{path}' is corrupt: {name} sha256 {actual[:12]}… != manifest {digest[:12]}…; "
                    "re-create it with `fedcore data prepare`"
                )
        try:
            data = torch.load(path / "data.pt", weights_only=True)
            truth = _truth_from_tensors(torch.load(path / "truth.pt", weights_only=True))
        except Exception as err:  # checksums matched, so this is a version/format problem
            raise ArtifactError(f"artifact '{path}' cannot be read ({type(err).__name__}); re-create it") from None
        return cls(
            x_train=data["x_train"], y_train=data["y_train"], x_test=data["x_test"], y_test=data["y_test"],
            client_indices=[t.numpy() for t in data["client_indices"]], truth=truth,
            meta=manifest["meta"], manifest=manifest, val=_val_from_tensors(data),
        )


class FederatedView:
    """What a method may see: inputs, working labels, client index arrays, and metadata.

    Ground truth is not stored here; reading a ground-truth name raises
    `GroundTruthAccessError` so a method that tries finds out immediately.
    """

    _FORBIDDEN = frozenset({"truth", "y_true", "is_noisy_sample", "is_noisy_client", "noise_type",
                            "target_rate", "realized_rate", "y_true_known"})
    __slots__ = ("x_train", "y_train", "client_indices", "num_classes", "task", "meta")

    def __init__(self, fed: FederatedDataset) -> None:
        self.x_train = fed.x_train
        self.y_train = fed.y_train
        self.client_indices = [np.asarray(p) for p in fed.client_indices]
        self.num_classes = fed.num_classes
        self.task = fed.task
        meta = {k: v for k, v in fed.meta.items() if k not in ("histogram_noisy",)}
        if isinstance(meta.get("extras"), dict):
            # Dataset extras named true_* (e.g. an exact label correlation) are ground truth too.
            meta["extras"] = {k: v for k, v in meta["extras"].items() if not k.startswith("true_")}
        self.meta = meta

    def __getattr__(self, name: str) -> Any:
        if name in FederatedView._FORBIDDEN:
            raise GroundTruthAccessError(f"methods cannot read ground truth ('{name}'); only metrics may")
        raise AttributeError(name)

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)


def _replace_dir(tmp: Path, out: Path) -> None:
    # Swap in the new directory; the old one is removed only after the new one is in place,
    # so an interrupted save never leaves `out` half-written.
    if out.exists():
        if not out.is_dir() or (not (out / "manifest.json").is_file() and any(out.iterdir())):
            raise ArtifactError(f"'{out}' exists and is not a fedcore artifact; choose another --out")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def _read_manifest(path: Path) -> dict[str, Any]:
    mf = path / "manifest.json"
    if not mf.is_file():
        raise ArtifactError(
            f"'{path}' is not a FederatedDataset artifact (no manifest.json); run `fedcore data prepare`"
        )
    try:
        manifest = json.loads(mf.read_bytes().decode("utf-8"))
        files = manifest["files"]
        version = manifest["format_version"]
        # Valid JSON of the wrong shape is as corrupt as a truncated file (it used to crash `load`).
        if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()) \
                or not isinstance(manifest["meta"], dict):
            raise TypeError
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise ArtifactError(f"artifact '{path}' has a corrupt manifest.json; re-create it") from None
    if version != FORMAT_VERSION:
        raise ArtifactError(
            f"artifact '{path}' has format {version}; this fedcore reads {FORMAT_VERSION}; re-create it"
        )
    if manifest.get(SELF_DIGEST) != manifest_digest(manifest):
        raise ArtifactError(f"artifact '{path}' is corrupt: manifest.json was edited or damaged (its sha256 "
                            "does not match); re-create it with `fedcore data prepare`")
    if set(files) != set(FILES):
        raise ArtifactError(f"artifact '{path}' manifest lists {sorted(files)}, expected {list(FILES)}")
    return manifest


def _local_artifact_dir(uri: str) -> Path:
    if uri.startswith("s3://"):
        return stage_prefix(uri, Path(os.environ.get("FEDCORE_CACHE", ".fedcore-cache")))
    if "://" in uri:  # e.g. gs://: Path() would turn it into a missing local folder 'gs:/...'
        raise ArtifactError(f"dataset artifact '{uri}' has an unsupported scheme; use a local dir or s3://bucket/prefix")
    return Path(uri)


_VAL_KEYS = {"x_val": "x", "y_val": "y", "val_owner": "owner", "x_server": "x_server", "y_server": "y_server"}


def _val_to_tensors(val: ValidationSet | None) -> dict[str, torch.Tensor]:
    if val is None:
        return {}  # an artifact without validation is byte-for-byte what it was before validation existed
    return {key: torch.from_numpy(np.ascontiguousarray(getattr(val, attr))) for key, attr in _VAL_KEYS.items()}


def _val_from_tensors(data: dict[str, Any]) -> ValidationSet | None:
    if "x_val" not in data:
        return None
    return ValidationSet(**{attr: data[key].numpy() for key, attr in _VAL_KEYS.items()})


def _truth_to_tensors(t: GroundTruth) -> dict[str, Any]:
    d: dict[str, Any] = {
        "y_true": torch.from_numpy(np.ascontiguousarray(t.y_true)),
        "is_noisy_sample": torch.from_numpy(np.ascontiguousarray(t.is_noisy_sample)),
        "is_noisy_client": torch.from_numpy(np.ascontiguousarray(t.is_noisy_client)),
        "target_rate": torch.from_numpy(np.asarray(t.target_rate, dtype=np.float64)),
        "realized_rate": torch.from_numpy(np.asarray(t.realized_rate, dtype=np.float64)),
        "noise_type": list(t.noise_type),
    }
    if t.y_true_known is not None:
        d["y_true_known"] = torch.from_numpy(np.ascontiguousarray(t.y_true_known))
    return d


def _truth_from_tensors(d: dict[str, Any]) -> GroundTruth:
    known = d.get("y_true_known")
    return GroundTruth(
        y_true=d["y_true"].numpy(), is_noisy_sample=d["is_noisy_sample"].numpy(),
        is_noisy_client=d["is_noisy_client"].numpy(), noise_type=list(d["noise_type"]),
        target_rate=d["target_rate"].numpy(), realized_rate=d["realized_rate"].numpy(),
        y_true_known=None if known is None else known.numpy(),
    )


def scene_report(fed: FederatedDataset) -> dict[str, Any]:
    """Per-client size, classes held, noise flag/type/target/realized rate, plus totals (and the
    premise check of consensus methods where the dataset knows its true label correlation)."""
    t = fed.truth
    clients = []
    held = np.bincount(fed.val.owner, minlength=fed.num_clients) if fed.val is not None else None
    for cid, idx in enumerate(fed.client_indices):
        clients.append({
            "client": cid,
            "size": int(len(idx)),
            **({"val_size": int(held[cid])} if held is not None else {}),
            "classes": int(len(np.unique(t.y_true[idx], axis=0))) if t.y_true.ndim == 1 else int(
                (t.y_true[idx].sum(axis=0) > 0).sum()),
            "noisy": bool(t.is_noisy_client[cid]),
            "type": t.noise_type[cid],
            "target_rate": _f(t.target_rate[cid]),
            "realized_rate": _f(t.realized_rate[cid]),
        })
    return {
        "dataset": fed.meta["name"],
        "task": fed.meta["task"],
        "num_clients": fed.num_clients,
        "num_train": fed.meta["num_train"],
        "num_test": fed.meta["num_test"],
        "noisy_clients": int(np.sum(t.is_noisy_client)),
        "overall_noise_rate": _overall(t),
        "clients": clients,
        "notes": fed.meta.get("notes", []),
        **({"validation": fed.meta["validation"]} if "validation" in fed.meta else {}),
        **_premise(fed),
        **_federation(fed),
    }


def _federation(fed: FederatedDataset) -> dict[str, Any]:
    if not fed.meta.get("labels_as_given"):
        return {}  # built-in datasets: their scene report stays what it was
    return {"federation": federation_summary(fed)}


def _overall(t: GroundTruth) -> float | None:
    # Real noise is known only on trusted samples: the rate is theirs, None when there are none.
    if t.y_true_known is None:
        return _f(np.mean(t.is_noisy_sample))
    known = np.asarray(t.y_true_known, bool)
    return _f(np.mean(t.is_noisy_sample[known])) if known.any() else None


def _premise(fed: FederatedDataset) -> dict[str, Any]:
    truth = (fed.meta.get("extras") or {}).get("true_corr")
    if fed.task != "multi" or truth is None:
        return {}
    labels = {"clean": fed.truth.y_true, "annotated": fed.y_train.numpy()}
    return {"premise": premise_check(labels, fed.client_indices, truth)}


def _f(x: float) -> float | None:
    x = float(x)
    return None if np.isnan(x) else round(x, 4)
