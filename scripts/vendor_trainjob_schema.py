"""Vendor the Kubeflow Trainer TrainJob CRD's OpenAPI schema for offline manifest validation.

    python scripts/vendor_trainjob_schema.py CRD.yaml VERSION COMMIT > fedcore/deploy/schemas/trainjob.v1alpha1.json

CRD.yaml is `manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml` of github.com/kubeflow/trainer
at tag VERSION (commit COMMIT). Descriptions are dropped (they do not validate anything); the
source, version, commit and the sha256 of the CRD file are kept in the schema's `$comment`.
"""

import hashlib
import json
import sys
from pathlib import Path

import yaml


def strip(obj):
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if k != "description"}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def main(crd_path: str, version: str, commit: str) -> None:
    raw = Path(crd_path).read_bytes()
    crd = yaml.safe_load(raw)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = strip(served["schema"]["openAPIV3Schema"])
    schema["$comment"] = (f"openAPIV3Schema of CRD {crd['metadata']['name']} (v1alpha1) from "
                          f"https://github.com/kubeflow/trainer/blob/{version}/manifests/base/crds/"
                          f"trainer.kubeflow.org_trainjobs.yaml, Kubeflow Trainer {version}, commit {commit}, "
                          f"file sha256 {hashlib.sha256(raw).hexdigest()}; descriptions removed "
                          "(scripts/vendor_trainjob_schema.py)")
    json.dump(schema, sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
