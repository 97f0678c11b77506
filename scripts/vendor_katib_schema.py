"""Vendor the Katib Experiment's OpenAPI schema for offline manifest validation.

    python scripts/vendor_katib_schema.py swagger.json COMMIT > fedcore/deploy/schemas/katib-experiment.v1beta1.json

swagger.json is `api/openapi-spec/swagger.json` of github.com/kubeflow/katib at commit COMMIT. Katib's
Experiment CRD carries no schema of its own (x-kubernetes-preserve-unknown-fields), so the
generated OpenAPI spec of its Go types is what says which fields exist. This keeps
`v1beta1.Experiment` and every definition it reaches, rewrites the `$ref`s to `#/definitions/`
(JSON-schema draft 7), and drops descriptions; the source, commit and the file's sha256 go in
`$comment`. The trial template (`trialSpec`, a RawExtension) is validated separately, as the
Kubernetes object it is.
"""

import hashlib
import json
import sys
from pathlib import Path

PREFIX = "#/components/schemas/"
ROOT = "v1beta1.Experiment"


def refs(obj, found: set[str]) -> None:
    if isinstance(obj, dict):
        ref = obj.get("$ref")
        if isinstance(ref, str) and ref.startswith(PREFIX):
            found.add(ref[len(PREFIX):])
        for v in obj.values():
            refs(v, found)
    elif isinstance(obj, list):
        for v in obj:
            refs(v, found)


def rewrite(obj, names: bool = False):
    """names: obj is a `properties` map, whose keys are field names (a field may be called description)."""
    if isinstance(obj, dict):
        out = {k: rewrite(v, k == "properties" and not names) for k, v in obj.items()
               if names or k != "description"}
        if isinstance(out.get("$ref"), str):
            out["$ref"] = "#/definitions/" + out["$ref"][len(PREFIX):]
        return out
    if isinstance(obj, list):
        return [rewrite(v) for v in obj]
    return obj


def main(swagger_path: str, commit: str) -> None:
    raw = Path(swagger_path).read_bytes()
    schemas = json.loads(raw)["components"]["schemas"]
    keep, todo = set(), [ROOT]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found: set[str] = set()
        refs(schemas[name], found)
        todo.extend(sorted(found - keep))
    out = {"$ref": f"#/definitions/{ROOT}", "definitions": {k: rewrite(schemas[k]) for k in sorted(keep)}}
    out["$comment"] = (f"{ROOT} and the definitions it reaches, from https://github.com/kubeflow/katib/blob/"
                       f"{commit}/api/openapi-spec/swagger.json (file sha256 {hashlib.sha256(raw).hexdigest()}); "
                       "descriptions removed (scripts/vendor_katib_schema.py)")
    json.dump(out, sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
